"""Scripts tests start as real processes (to race, to kill with SIGKILL); each puts
what it imports on ``sys.path`` itself. ``fold_worker`` is imported by its test too."""
