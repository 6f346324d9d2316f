"""Command-line tools around the game and trained policies.

`bin/play` (`hm.tools.play`) plays a game by hand, `bin/watch` (`hm.tools.watch`) shows
a trained agent play, `bin/evaluate` (`hm.tools.evaluate`) measures one over many
games; `hm.tools.policy` loads what the trainer writes. Each tool's `main(argv)` does
its work and returns the exit code, so tests call it directly.
"""
