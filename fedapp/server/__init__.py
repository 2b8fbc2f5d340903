"""The server side: the round loop, strategy, roster, reply and run checks, checkpoints, run folders, results and progress."""
