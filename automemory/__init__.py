"""Auto memory: completed, idle tasks become project memories; new tasks start with them."""
