"""`hm.tools.program_ablation`: the `ProgramRule` masks, and the paired arms on random play
(a network of `BASELINE_ARCHITECTURE`'s shape, as in test_evaluate.py)."""

import jax
import jax.numpy as jnp
import pytest

from hm.game import constants as C
from hm.tools import evaluate, program_ablation
from hm.tools.players import AbstractPlayer, ProgramRule, random_player
from tests.train.compiles import compilations

MOVE = 0
PROGRAM = C.PROGRAM_ACTION_OFFSET + 2


class LastLegal(AbstractPlayer):
    """Takes the legal action with the highest index (programs come after the moves)."""

    def choose(self, states, obs, mask, key, stage_moves):
        return (mask.shape[-1] - 1 - jnp.argmax(mask[:, ::-1], axis=-1)).astype(jnp.int32)


def _mask(*legal: int) -> jax.Array:
    return jnp.zeros((1, C.NUM_ACTIONS), bool).at[0, jnp.asarray(legal)].set(True)


@pytest.mark.parametrize("rule, legal, chosen", [
    ("ban", (MOVE, PROGRAM), MOVE),          # a program is legal but banned
    ("ban", (PROGRAM,), PROGRAM),            # nothing else is legal: the mask is left alone
    ("eager", (MOVE, C.ACTION_SIPHON, PROGRAM), PROGRAM),
    ("eager", (MOVE, C.ACTION_SIPHON), C.ACTION_SIPHON),   # no program legal: the game's own mask
    ("as-is", (MOVE, PROGRAM), PROGRAM),     # the game's own mask
])
def test_program_rule_masks(rule, legal, chosen):
    player = ProgramRule(inner=LastLegal(), rule=rule)
    action = player.choose(None, jnp.zeros((1, C.OBS_FLAT_SIZE)), _mask(*legal), jax.random.key(0), jnp.zeros(1, jnp.int32))
    assert int(action[0]) == chosen


def test_program_rule_refuses_an_unknown_rule():
    with pytest.raises(ValueError, match="rule must be one of .'as-is', 'ban', 'eager'."):
        ProgramRule(inner=LastLegal(), rule="sometimes")


def test_arms_are_paired_and_keep_their_rules():
    with compilations(evaluate._play_chunk) as compiled:
        report = program_ablation.ablate(random_player(), num_episodes=48, max_steps=96, seed=3)
    assert len(compiled) == 1, "the three arms share one compiled program"
    assert report["paired_games"] > 0
    assert report["ban"]["ran_share"] == 0.0 and report["ban"]["runs_per_game"] == 0.0
    # eager runs a program at the first state where one is legal, in every paired game
    assert report["eager"]["ran_share"] == 1.0
    assert 0.0 < report["as-is"]["ran_share"] <= 1.0
    for arm in ("ban", "eager"):
        assert report[arm]["d_stage"] == pytest.approx(report[arm]["stage"] - report["as-is"]["stage"])
        assert report[arm]["d_return"] == pytest.approx(report[arm]["return"] - report["as-is"]["return"],
                                                        abs=1e-4)


def test_cli_names_the_bad_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        program_ablation.main(["--baseline", "greedy", "--episodes", "0"])
    assert exit_info.value.code == 2
    assert "--episodes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        program_ablation.main([])
    assert "RUN_OR_POLICY" in capsys.readouterr().err
