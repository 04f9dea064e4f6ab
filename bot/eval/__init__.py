"""`kelpie eval`: recorded incidents (cases), the replay server that serves their fixtures,
the runner that drives the real engine on them, the graders and the reports."""
