"""What the proxy tells the outside: metrics, structured logs, traces and its own timing."""
