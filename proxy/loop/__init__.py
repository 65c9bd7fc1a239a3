"""The guard loop: one agent request through its attempts, the guards' verdicts acted on, one commit."""
