"""Every table of the rules, named, with the section of docs/rules.md it comes from (§).

Rules code looks values up here; nothing else in `hm` repeats a number of the rules.
Tables are plain tuples (host side) and `numpy` arrays (to be closed over by jitted
code as constants).
"""

import numpy as np

# §1 Board
ROWS = 6
COLS = 6
NUM_CELLS = ROWS * COLS
CORNERS = ((0, 0), (0, 5), (5, 0), (5, 5))
CORNER_CELLS = tuple(r * COLS + c for r, c in CORNERS)

# §1 canonical direction order: up, down, left, right (action index = order).
DIRECTION_NAMES = ("up", "down", "left", "right")
DIRECTION_DELTAS = np.array([[1, 0], [-1, 0], [0, -1], [0, 1]], dtype=np.int32)

# §1.1 cell content
EMPTY, BLOCK, PICKUP, EXIT = 0, 1, 2, 3

# §2.3 enemy types: max HP and activations per enemy phase ("speed")
VIRUS, DAEMON, GLITCH, CRYPTOG = 0, 1, 2, 3
ENEMY_NAMES = ("virus", "daemon", "glitch", "cryptog")
ENEMY_MAX_HP = np.array([2, 3, 2, 2], dtype=np.int8)
ENEMY_SPEED = np.array([2, 1, 1, 1], dtype=np.int8)
NUM_ENEMY_TYPES = 4

# §3 actions
NUM_ACTIONS = 28
ACTION_SIPHON = 4
PROGRAM_ACTION_OFFSET = 5

# §4 program ids and names, in id order (action = 5 + id). Each program's cost, spawn
# count, condition and effect are its entry in `program_table.PROGRAMS`.
PROGRAM_NAMES = (
    "PUSH", "PULL", "CRASH", "WARP", "POLY", "WAIT", "DEBUG", "ROW", "COL", "UNDO",
    "STEP", "SIPH+", "EXCH", "SHOW", "RESET", "CALM", "D_BOM", "DELAY", "ANTI-V",
    "SCORE", "REDUC", "ATK+", "HACK",
)
NUM_PROGRAMS = len(PROGRAM_NAMES)
(PUSH, PULL, CRASH, WARP, POLY, WAIT, DEBUG, ROW, COL, UNDO, STEP, SIPH_PLUS, EXCH,
 SHOW, RESET, CALM, D_BOM, DELAY, ANTI_V, SCORE, REDUC, ATK_PLUS, HACK) = range(NUM_PROGRAMS)
# docs/scenarios.md: program blocks named in a scenario without spawnCount spawn 2.
SCENARIO_PROGRAM_SPAWN_DEFAULT = 2
SCENARIO_DATA_POINTS_DEFAULT = 5

# §12 stages
NUM_STAGES = 8
FIRST_INTERVAL = 12          # §2.2 interval at game start
INTERVAL_BASE = 13           # §12.1 interval := 13 − stage
MIN_INTERVAL = 4             # §8 interval := max(4, interval − 1)
SIPHON_TASK_DELAY = 5        # §8 nextTask += 5
DELAY_TURNS = 3              # §9.17
MAX_HP = 3                   # §2.1
MAX_ATK_USES = 2             # §9.21
STARTING_BONUS_CREDITS = 10  # §12.5
STARTING_BONUS_ENERGY = 11
STARTING_BONUS_SIPHONS = 1
BLOCK_COUNT_MIN, BLOCK_COUNT_MAX = 5, 11   # §12.4
LAYOUT_ATTEMPTS = 100                      # §12.4
DATA_POINTS_MIN, DATA_POINTS_MAX = 1, 9    # §12.4
P_DATA_BLOCK = 0.5
P_QUESTION_BLOCK = 0.1
RESOURCE_AMOUNT_PROBS = np.array([0.45, 0.45, 0.10], dtype=np.float32)  # amounts 1, 2, 3

# §14.1 reward
STAGE_REWARD = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 100.0], dtype=np.float32)
# death penalty for dying on stage k: −0.5 × sum(STAGE_REWARD[:k−1]) (index by stage − 1)
DEATH_PENALTY = np.array(
    [-0.5 * float(STAGE_REWARD[:k].sum()) for k in range(NUM_STAGES)], dtype=np.float32)
STEP_PENALTY = -0.01
SCORE_REWARD = 0.5
KILL_REWARD = 0.3
PICKUP_REWARD = 1.0
DISTANCE_REWARD = 0.05
VICTORY_REWARD = 500.0
VICTORY_SCORE_REWARD = 100.0
RESOURCE_REWARD = 0.05
HOLDING_REWARD = 0.01
DAMAGE_REWARD = -1.0
RECOVERY_REWARD = 1.0
SIPHON_QUALITY_REWARD = -0.5 * 0.05
PROGRAM_WASTE_REWARD = -0.3
SIPHON_DEATH_REWARD = -10.0

# The 15 reward terms of §14.1, in table order; `info["reward_terms"]` uses these names.
REWARD_TERMS = (
    "step", "stage", "score", "kills", "pickup", "distance", "victory", "death",
    "resources", "holding", "damage", "recovery", "siphon_quality", "program_waste",
    "siphon_death",
)

# §15 observation
PLAYER_FEATURES = 10
GRID_CHANNELS = 42
OBS_FLAT_SIZE = PLAYER_FEATURES + NUM_PROGRAMS + ROWS * COLS * GRID_CHANNELS  # 1545
CH_ENEMY_TYPE = 0        # 0..3 one-hot of enemy type
CH_ENEMY_HP = 4
CH_ENEMY_STUNNED = 5
CH_ENEMY_FROM_SIPHON = 6
CH_BLOCK_DATA = 7
CH_BLOCK_PROGRAM = 8
CH_BLOCK_QUESTION = 9
CH_BLOCK_POINTS = 10
CH_BLOCK_SIPHONED = 11
CH_BLOCK_PROGRAM_ID = 12  # 12..34 one-hot of the program id
CH_BLOCK_SPAWN = 35
CH_TRANSMISSION = 36
CH_CREDITS = 37
CH_ENERGY = 38
CH_PICKUP = 39
CH_EXIT = 40
CH_SIPHON_CENTER = 41

# §17.1 fixed capacities; §9.10 UNDO history capacity (H ≥ 8).
MAX_ENEMIES = 36
MAX_TRANSMISSIONS = 36
HISTORY_CAPACITY = 8

# Version of the rules implementation; checkpoints record it (bump on any rule change).
GAME_VERSION = 1
