"""`python -m cli`: the same as the `stoker` command."""

from cli import app

# Guarded: a process the daemon spawns to make plans (daemon/planner.py) imports the main
# module again, and must not run the command line a second time.
if __name__ == "__main__":
    app()
