"""§15.3 cases the observable checks do not reach: entities stacked on one cell, and the
views of `Observation` (player, programs, grid) against its flat layout.

Stacks arise in play only through PUSH / PULL collisions (§17.1) but a scenario can state
them directly; the enemy and transmission channels then show the *first* entity in list
order, and a hidden cryptog first on a cell hides whatever stands beneath it.
"""

import numpy as np
import pytest

import hm.game as game

CH_VIRUS, CH_DAEMON, CH_GLITCH, CH_CRYPTOG = 0, 1, 2, 3
CH_ENEMY_HP, CH_ENEMY_STUNNED, CH_ENEMY_FROM_SIPHON = 4, 5, 6
CH_TRANSMISSION = 36


@pytest.fixture(scope="module")
def enemy_channels(observe, scenario, hmx):
    """enemy_channels(enemies, player=(0, 0), **extra) -> channels 0..6 of cell (3, 4)."""

    def channels(enemies, player=(0, 0), **extra):
        d = scenario(*player, enemies=enemies, **extra)
        obs = observe(game.from_dict(d))
        return np.asarray(obs.grid)[3, 4, :7]

    return channels


def _expected(kind, hp, stunned=0.0, from_siphon=0.0):
    v = np.zeros(7, np.float32)
    v[kind] = 1.0
    v[CH_ENEMY_HP] = np.float32(hp) / np.float32(3)
    v[CH_ENEMY_STUNNED] = stunned
    v[CH_ENEMY_FROM_SIPHON] = from_siphon
    return v


def test_stacked_enemies_show_the_first_in_list_order(enemy_channels, hmx):
    got = enemy_channels([hmx.virus(3, 4, hp=1, stunned=True), hmx.daemon(3, 4, hp=3)])
    np.testing.assert_array_equal(got, _expected(CH_VIRUS, 1, stunned=1.0))
    got = enemy_channels([hmx.daemon(3, 4, hp=2), hmx.virus(3, 4, hp=1, from_siphon=True)])
    np.testing.assert_array_equal(got, _expected(CH_DAEMON, 2))


def test_hidden_cryptog_first_hides_the_visible_enemy_beneath(enemy_channels, hmx):
    stack = [hmx.cryptog(3, 4, hp=2), hmx.glitch(3, 4, hp=1, stunned=True)]
    # player at (0, 0): not in the cryptog's row or column, SHOW off
    np.testing.assert_array_equal(enemy_channels(stack), np.zeros(7, np.float32))
    # in line with the player, or under SHOW, the cryptog itself is shown
    np.testing.assert_array_equal(enemy_channels(stack, player=(3, 0)),
                                  _expected(CH_CRYPTOG, 2))
    np.testing.assert_array_equal(enemy_channels(stack, showActivated=True),
                                  _expected(CH_CRYPTOG, 2))


def test_visible_enemy_first_is_shown_over_a_hidden_cryptog(enemy_channels, hmx):
    got = enemy_channels([hmx.glitch(3, 4, hp=2), hmx.cryptog(3, 4, hp=1)])
    np.testing.assert_array_equal(got, _expected(CH_GLITCH, 2))


def test_stacked_transmissions_show_the_first_timer(observe, scenario, hmx):
    d = scenario(0, 0, transmissions=[hmx.transmission(2, 2, 2), hmx.transmission(2, 2, 7)])
    assert np.asarray(observe(game.from_dict(d)).grid)[2, 2, CH_TRANSMISSION] == 0.5
    d = scenario(0, 0, transmissions=[hmx.transmission(2, 2, 9), hmx.transmission(2, 2, 1)])
    assert np.asarray(observe(game.from_dict(d)).grid)[2, 2, CH_TRANSMISSION] == 1.0


def test_observation_views_match_the_flat_layout(observe, scenario, hmx):
    d = scenario(2, 3, credits=7, energy=60, dataSiphons=2,
                 ownedPrograms=[hmx.ACTION["WAIT"], hmx.ACTION["HACK"]],
                 enemies=[hmx.virus(3, 4)], blocks=[hmx.data_block(1, 1, 4)])
    obs = observe(game.from_dict(d))
    flat = np.asarray(obs.flat())
    assert flat.shape == (1545,) and flat.dtype == np.float32
    assert obs.player.shape == (10,) and obs.player.dtype == np.float32
    assert obs.programs.shape == (23,) and obs.programs.dtype == np.int32
    assert obs.grid.shape == (6, 6, 42) and obs.grid.dtype == np.float32
    np.testing.assert_array_equal(
        flat, np.concatenate([np.asarray(obs.player), np.asarray(obs.programs, np.float32),
                              np.asarray(obs.grid).reshape(-1)]))
    owned = np.flatnonzero(np.asarray(obs.programs))
    assert owned.tolist() == [hmx.ACTION["WAIT"] - 5, hmx.ACTION["HACK"] - 5]
