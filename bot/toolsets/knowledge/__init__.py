"""The knowledge toolset: the team's runbooks and the incidents a person confirmed."""
