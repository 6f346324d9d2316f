"""The actor-critic network: an encoder of the observation, a tanh trunk, two heads.

`Network(obs_size, num_actions, hidden_dim, num_layers, kind=..., critic=...)`:

* `kind="mlp"` (the class's default, and the trainer's for envs other than the game):
  the trunk reads the flat observation (1545 numbers for the
  game) through `num_layers` tanh layers of `hidden_dim` units. Its first layer,
  1545 x 256, is 84 % of the arithmetic.
* `kind="conv"`: a `GridEncoder` first looks at the 6x6 board: a per-cell embedding
  (a 1x1 convolution, 44 -> 16 channels, the same weights on every cell) and one 3x3
  convolution (16 -> 16) give every cell a summary of its 3x3 neighbourhood; the
  flattened cells, with the player and program vectors, then feed the same tanh trunk.
  Its first dense layer reads 609 numbers instead of 1545, so its forward costs 68 % of
  the MLP's FLOPs; forward + backward costs 93 % (that layer and the convolution need
  input gradients, the MLP's first layer does not), and on CPU it trains about 2x
  slower than the MLP (small convolutions run far below matmul speed; docs/networks.md).
  It needs the game's observation layout (`obs_size` 1545).
* `kind="local"`: the MLP, reading the flat observation and, after it, the 5x5 cells
  centred on the player (`LocalView`: the 42 grid channels and an "on the board"
  plane of each, 1075 numbers). The flat observation gives the player's cell only as
  two numbers (row / 5, col / 5), so "an enemy next to me" is, for the MLP, a
  conjunction of those and one of 36 cells' channels; here it is a fixed input. No
  parameters of its own: the first dense layer reads 2620 numbers instead of 1545
  (forward 1.6x the MLP's FLOPs). It needs the game's observation layout. The trainer's
  default (`TrainConfig.network`; docs/results.md#default-network).

`critic="shared"` runs one trunk (and encoder) for both heads, which halves the cost of
the network, where PPO spends its time on CPU; `critic="separate"` gives the value head
its own encoder and trunk of the same shape, so value targets in the hundreds do not
pull the policy's features around (twice the arithmetic).

Value normalisation (PopArt, van Hasselt et al., "Learning values across many orders of
magnitude", NeurIPS 2016). The value head predicts a normalised value; the network
returns `value_shift + value_scale * head(h)`, so every user of `evaluate` (the
rollout, GAE, the tools) sees values in reward units. The two statistics are not
trained by gradient (they pass through `stop_gradient`); with `--value-norm` the learner
sets them to running estimates of the value targets' mean and standard deviation and
rescales the head so that its outputs are unchanged (`popart_update`). Without it
they stay 0 and 1, which returns the head's output exactly.

Value transform (`value_transform="sqrt"`; "none" by default). The value head, with its
PopArt statistics, predicts `h(V)` rather than `V`, where
`h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x` with `eps = 1e-3` (Pohlen et al.,
"Observe and Look Further", 2018; the transform of R2D2 and MuZero), and the network
returns `h^-1` of it, so every user of `evaluate` still sees reward units. `h` keeps
values of order 1 of that order (h(1) = 0.42) and squeezes the large ones (h(500) =
21.9), so a victory's +500 no longer sets the scale at which the early stages' values
are learnt. The learner measures the value error in the head's units
(`Network.head_units`).

tanh rather than ReLU: bounded activations keep the heads' inputs in a fixed range,
which is what a large study of on-policy RL found works best for PPO (Andrychowicz et
al., "What Matters in On-Policy Reinforcement Learning?", ICLR 2021), and is robust in
bfloat16; its cost is negligible next to the matmuls. Initialisation follows PPO practice:
orthogonal weights with gain sqrt(2) in encoder and trunk, 0.01 on the policy head (an
almost uniform initial policy), 1.0 on the value head; zero biases.

Why the MLP's first layer is still dense: computing it from the non-zero entries (an
embedding bag over about 60 of the 1545 inputs, at most 120 seen in random play) makes
the forward product about 3x cheaper on this CPU, but finding those entries (a prefix
sum and a scatter per observation) costs about 3x the dense product, and the weight
gradient as a scatter-add is slower than the dense `x.T @ dh`: it does not pay for
itself (`bench/bench_first_layer.py`, docs/networks.md).
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float, PRNGKeyArray

from hm.game import constants as C
from hm.train import precision as precision_lib

# The network kinds (`--network`) and critic options (`--critic`).
KINDS = ("mlp", "conv", "local")
CRITICS = ("shared", "separate")
# The value transforms (`--value-transform`): the head predicts V itself, or h(V).
VALUE_TRANSFORMS = ("none", "sqrt")
# h's linear term, which makes h^-1 Lipschitz (Pohlen et al., 2018).
SQRT_EPS = 1e-3


def squash(x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x (the module docstring), with
    `sqrt(|x| + 1) - 1` computed as `|x| / (sqrt(|x| + 1) + 1)` (no cancellation near 0)."""
    magnitude = jnp.abs(x)
    return jnp.sign(x) * magnitude / (jnp.sqrt(magnitude + 1.0) + 1.0) + SQRT_EPS * x


def unsquash(y: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
    """h^-1(y) = sign(y) (r^2 - 1) with r = (sqrt(1 + 4 eps a) - 1) / (2 eps), a = |y| + 1 + eps.

    Computed as r = 2a / (s + 1) and r - 1 = (2 (|y| + eps) - 4 eps a / (s + 1)) / (s + 1),
    s = sqrt(1 + 4 eps a): the same numbers without the cancellations of `s - 1` and
    `r^2 - 1`, which in float32 would cost about 1e-4 near 0.
    """
    magnitude = jnp.abs(y)
    a = magnitude + 1.0 + SQRT_EPS
    s_plus_1 = jnp.sqrt(1.0 + 4.0 * SQRT_EPS * a) + 1.0
    root = 2.0 * a / s_plus_1
    root_minus_1 = (2.0 * (magnitude + SQRT_EPS) - 4.0 * SQRT_EPS * a / s_plus_1) / s_plus_1
    return jnp.sign(y) * root_minus_1 * (root + 1.0)

# GridEncoder sizes: input planes are the 42 grid channels, the player's cell and an
# "on the board" plane (so the zero padding of the 3x3 convolution reads as off-board).
GRID_PLANES = C.GRID_CHANNELS + 2
CELL_CHANNELS = 16
# LocalView: the cells within this many rows and columns of the player (a 5x5 window;
# a virus moves two cells a turn).
LOCAL_RADIUS = 2
_HEAD = C.PLAYER_FEATURES + C.NUM_PROGRAMS  # the flat observation's non-grid prefix


class Linear(eqx.Module):
    """`y = x @ weight + bias` with the weight stored input-major."""

    weight: Float[Array, "fan_in fan_out"]
    bias: Float[Array, " fan_out"]

    def __init__(self, fan_in: int, fan_out: int, gain: float, *, key: PRNGKeyArray):
        init = jax.nn.initializers.orthogonal(scale=gain)
        self.weight = init(key, (fan_in, fan_out), jnp.float32)
        self.bias = jnp.zeros((fan_out,), jnp.float32)

    def __call__(self, x: Float[Array, "*cells fan_in"]) -> Float[Array, "*cells fan_out"]:
        y = x @ self.weight
        return y + jnp.broadcast_to(self.bias, y.shape)  # explicit: rank promotion is an error in tests


class Conv3x3(eqx.Module):
    """A 3x3 convolution over the board, zero-padded to keep its 6x6 size."""

    weight: Float[Array, "3 3 fan_in fan_out"]
    bias: Float[Array, " fan_out"]

    def __init__(self, fan_in: int, fan_out: int, gain: float, *, key: PRNGKeyArray):
        # orthogonal over the flattened 3 x 3 x fan_in inputs, as for a dense layer
        self.weight = jax.nn.initializers.orthogonal(scale=gain)(key, (3, 3, fan_in, fan_out), jnp.float32)
        self.bias = jnp.zeros((fan_out,), jnp.float32)

    def __call__(self, x: Float[Array, "rows cols fan_in"]) -> Float[Array, "rows cols fan_out"]:
        # `lax.conv` rather than a matmul over gathered neighbourhoods: on CPU the nine
        # shifted copies cost more than the convolution (forward 2x slower, measured).
        y = lax.conv_general_dilated(x[None], self.weight, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))[0]
        return y + jnp.broadcast_to(self.bias, y.shape)


def _player_cell(obs: Float[Array, " obs"]) -> tuple[Array, Array]:
    """The player's (row, col): the grid has no player channel; the player vector holds
    row / 5 and col / 5 (docs/rules.md §15)."""
    row = jnp.round(obs[0] * (C.ROWS - 1)).astype(jnp.int32)
    col = jnp.round(obs[1] * (C.COLS - 1)).astype(jnp.int32)
    return row, col


def _on_board(grid: Float[Array, "rows cols channels"]) -> Float[Array, "rows cols channels_1"]:
    """`grid` with a last plane of ones, so that padding outside the board reads as off-board."""
    return jnp.concatenate([grid, jnp.ones((*grid.shape[:2], 1), grid.dtype)], axis=-1)


class LocalView(eqx.Module):
    """The flat observation, then the (2r+1) x (2r+1) cells centred on the player.

    Each cell of the window gives the 42 grid channels and an "on the board" plane (0
    for cells past the edge), row by row from the top left; the centre is the player's
    own cell. No parameters: it rearranges the observation for the MLP.
    """

    radius: int = eqx.field(static=True, default=LOCAL_RADIUS)

    def out_size(self, obs_size: int) -> int:
        side = 2 * self.radius + 1
        return obs_size + side * side * (C.GRID_CHANNELS + 1)

    def window(self, obs: Float[Array, " obs"]) -> Float[Array, "side side planes"]:
        r, side = self.radius, 2 * self.radius + 1
        planes = _on_board(obs[_HEAD:].reshape(C.ROWS, C.COLS, C.GRID_CHANNELS))
        padded = jnp.pad(planes, ((r, r), (r, r), (0, 0)))
        row, col = _player_cell(obs)
        # padded (row, col) is the board's (row - r, col - r): the window's top left
        return lax.dynamic_slice(padded, (row, col, 0), (side, side, C.GRID_CHANNELS + 1))

    def __call__(self, obs: Float[Array, " obs"]) -> Float[Array, " features"]:
        return jnp.concatenate([obs, self.window(obs).reshape(-1)])


class GridEncoder(eqx.Module):
    """The board as 36 cells: a shared per-cell embedding, then a 3x3 convolution.

    Output: the 36 cells' features flattened, then the player and program vectors
    unchanged (`36 * 16 + 33 = 609` numbers).
    """

    embed: Linear   # 1x1 convolution: GRID_PLANES -> CELL_CHANNELS
    conv: Conv3x3   # CELL_CHANNELS -> CELL_CHANNELS

    def __init__(self, *, key: PRNGKeyArray):
        embed_key, conv_key = jax.random.split(key)
        self.embed = Linear(GRID_PLANES, CELL_CHANNELS, math.sqrt(2.0), key=embed_key)
        self.conv = Conv3x3(CELL_CHANNELS, CELL_CHANNELS, math.sqrt(2.0), key=conv_key)

    @staticmethod
    def out_size() -> int:
        return C.NUM_CELLS * CELL_CHANNELS + _HEAD

    def __call__(self, obs: Float[Array, " obs"]) -> Float[Array, " features"]:
        head = obs[:_HEAD]
        grid = obs[_HEAD:].reshape(C.ROWS, C.COLS, C.GRID_CHANNELS)
        row, col = _player_cell(obs)
        player = (jnp.arange(C.ROWS)[:, None] == row) & (jnp.arange(C.COLS)[None, :] == col)
        planes = _on_board(jnp.concatenate([grid, player[..., None].astype(obs.dtype)], axis=-1))
        cells = jnp.tanh(self.embed(planes))
        cells = jnp.tanh(self.conv(cells))
        return jnp.concatenate([cells.reshape(-1), head])


def _trunk(fan_in: int, hidden_dim: int, num_layers: int, key: PRNGKeyArray) -> tuple[Linear, ...]:
    keys = jax.random.split(key, num_layers)
    sizes = [fan_in] + [hidden_dim] * num_layers
    return tuple(Linear(sizes[i], sizes[i + 1], math.sqrt(2.0), key=keys[i]) for i in range(num_layers))


def _features(encoder: GridEncoder | LocalView | None, trunk: tuple[Linear, ...],
              obs: Float[Array, " obs"]) -> Float[Array, " hidden"]:
    h = obs if encoder is None else encoder(obs)
    for layer in trunk:
        h = jnp.tanh(layer(h))
    return h


def check_kind(kind: str, critic: str, obs_size: int, value_transform: str = "none") -> None:
    """Raise `ValueError` naming the problem if `kind`/`critic`/`value_transform` cannot be built here."""
    if kind not in KINDS:
        raise ValueError(f"unknown network kind {kind!r}; expected one of {', '.join(KINDS)}")
    if critic not in CRITICS:
        raise ValueError(f"unknown critic {critic!r}; expected one of {', '.join(CRITICS)}")
    if value_transform not in VALUE_TRANSFORMS:
        raise ValueError(f"unknown value transform {value_transform!r}; expected one of "
                         f"{', '.join(VALUE_TRANSFORMS)}")
    if kind in ("conv", "local") and obs_size != C.OBS_FLAT_SIZE:
        raise ValueError(f"the {kind} network reads the game's observation layout ({C.OBS_FLAT_SIZE} "
                         f"numbers); this environment's observation has {obs_size}")


class Network(eqx.Module):
    """Actor-critic on one flat observation (`evaluate` runs it on a batch).

    `encoder` is None for the MLP (the trunk reads the flat observation); the
    `value_encoder` and `value_trunk` are None when the critic shares the policy's
    encoder and trunk. `value_shift` and `value_scale` map the value head's normalised
    output to the head's units (the module docstring); they are not trained by gradient.
    `value_transform` says what those units are: reward units ("none") or h of them ("sqrt").
    """

    encoder: GridEncoder | LocalView | None
    trunk: tuple[Linear, ...]
    value_encoder: GridEncoder | LocalView | None
    value_trunk: tuple[Linear, ...] | None
    policy_head: Linear
    value_head: Linear
    value_shift: Float[Array, ""]
    value_scale: Float[Array, ""]
    obs_size: int = eqx.field(static=True)
    num_actions: int = eqx.field(static=True)
    kind: str = eqx.field(static=True)
    critic: str = eqx.field(static=True)
    value_transform: str = eqx.field(static=True)

    def __init__(self, obs_size: int, num_actions: int, hidden_dim: int, num_layers: int, *,
                 kind: str = "mlp", critic: str = "shared", value_transform: str = "none", key: PRNGKeyArray):
        check_kind(kind, critic, obs_size, value_transform)
        encoder_key, trunk_key, value_key, policy_head_key, value_head_key = jax.random.split(key, 5)

        def tower(tower_key):
            encoder_key, trunk_key = jax.random.split(tower_key)
            if kind == "conv":
                encoder = GridEncoder(key=encoder_key)
                fan_in = encoder.out_size()
            elif kind == "local":
                encoder = LocalView()
                fan_in = encoder.out_size(obs_size)
            else:
                encoder, fan_in = None, obs_size
            return encoder, _trunk(fan_in, hidden_dim, num_layers, trunk_key)

        self.encoder, self.trunk = tower(trunk_key)
        self.value_encoder, self.value_trunk = tower(value_key) if critic == "separate" else (None, None)
        self.policy_head = Linear(hidden_dim, num_actions, 0.01, key=policy_head_key)
        self.value_head = Linear(hidden_dim, 1, 1.0, key=value_head_key)
        self.value_shift = jnp.zeros((), jnp.float32)
        self.value_scale = jnp.ones((), jnp.float32)
        self.obs_size = obs_size
        self.num_actions = num_actions
        self.kind = kind
        self.critic = critic
        self.value_transform = value_transform

    def __call__(self, obs: Float[Array, " obs"]) -> tuple[Float[Array, " actions"], Float[Array, ""]]:
        """Logits and value, in the dtype of the parameters and input."""
        h = _features(self.encoder, self.trunk, obs)
        value_h = h if self.value_trunk is None else _features(self.value_encoder, self.value_trunk, obs)
        normalised = self.value_head(value_h)[0]
        value = lax.stop_gradient(self.value_shift) + lax.stop_gradient(self.value_scale) * normalised
        if self.value_transform == "sqrt":
            value = unsquash(value)
        return self.policy_head(h), value

    def head_units(self, values: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        """Values in reward units mapped to the units the value head (with its PopArt
        statistics) predicts: `h(values)` under the sqrt transform, else themselves."""
        return squash(values) if self.value_transform == "sqrt" else values


def popart_update(network: Network, shift: Float[Array, ""], scale: Float[Array, ""]) -> Network:
    """New value statistics, with the head rescaled so that every value is unchanged.

    With old statistics (mu, sigma) and new (mu', sigma'), the head's weight becomes
    `w * sigma / sigma'` and its bias `(sigma * b + mu - mu') / sigma'`, so
    `mu' + sigma' * head'(h) == mu + sigma * head(h)` for every h (PopArt's "preserving
    outputs precisely").
    """
    head = network.value_head
    weight = head.weight * (network.value_scale / scale)
    bias = (network.value_scale * head.bias + network.value_shift - shift) / scale
    return eqx.tree_at(lambda n: (n.value_head.weight, n.value_head.bias, n.value_shift, n.value_scale),
                       network, (weight, bias, shift, scale))


def evaluate(
    network: Network, obs: Float[Array, "batch obs"], precision: str
) -> tuple[Float[Array, "batch actions"], Float[Array, " batch"]]:
    """Run the network under a precision policy; logits and values come back float32.

    Args:
        network: float32 master parameters.
        obs: float32 observations.
        precision: "f32" or "bf16" (see `hm.train.precision`).
    """
    dtype = precision_lib.compute_dtype(precision)
    logits, values = jax.vmap(precision_lib.cast_floating(network, dtype))(obs.astype(dtype))
    return precision_lib.to_f32(logits), precision_lib.to_f32(values)


def flops_per_sample(network: Network, batch: int = 256) -> dict[str, float]:
    """Floating-point operations per observation, as XLA counts them on this backend.

    `forward` is one `evaluate`; `forward_backward` is the forward plus the gradient with
    respect to the parameters (what a PPO minibatch step costs, before the optimizer).
    Counted on the compiled programs (`jax.stages.Compiled.cost_analysis`), so encoder
    copies and activations are included; divided by `batch`.
    """
    obs = jnp.zeros((batch, network.obs_size), jnp.float32)

    def forward(params, obs):
        logits, values = evaluate(params, obs, "f32")
        return jnp.sum(logits) + jnp.sum(values)

    def count(function) -> float:
        analysis = jax.jit(function).lower(network, obs).compile().cost_analysis()
        if isinstance(analysis, list):  # older jaxlib: one dict per program
            analysis = analysis[0]
        return float(analysis["flops"]) / batch

    return {"forward": count(forward), "forward_backward": count(jax.grad(forward))}
