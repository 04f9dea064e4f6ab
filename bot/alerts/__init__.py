"""Alerts open their own investigation: webhook receivers (Alertmanager, Grafana), routes to
channels, one Slack thread per alert group investigated under the channel's role."""
