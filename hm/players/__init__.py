"""Scripted players of the game: below the trainer and the tools, above `hm.game`.

`hm.players.greedy` is the one-step-lookahead player of `bin/evaluate --baseline greedy`,
the trainer's default teacher, and the search's planning baseline's value.
"""
