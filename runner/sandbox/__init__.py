"""Where a component runs: a local subprocess or one container per invocation."""
