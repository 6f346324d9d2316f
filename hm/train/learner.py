"""The learner: K whole PPO updates fused into one compiled, multi-device program.

One call of the function from `make_train_fn` runs `updates_per_call` (K) updates:

    scan over K updates:
        start the env slots that hold no game yet (only before the first update)
        scan over num_steps: policy forward, inverse-CDF sampling, env step with
            truncation and auto-reset (`hm.env`); store compact observations
        value of the last observation; GAE by a reverse scan
        scan over update_epochs: scan over num_minibatches: loss, gradient, Adam

The host runs only between calls (logging, checkpoints). The program is a
`jax.shard_map` over the "data" axis of the mesh: every device steps its share of the
env slots, computes the gradient of its share of each minibatch, and the gradients
are averaged over devices (`lax.pmean`) so every device applies the same global
gradient to its copy of the parameters. Parameters and optimizer state are
replicated, env slots sharded. All randomness is keyed by global env slot and
minibatch-group indices, so a run gives the same result (to float rounding) on any
device count for the same global batch.

TrainState fields (what a checkpoint holds; every leaf is a `jax.Array`):

    params      Network: float32 master weights (replicated)
    opt_state   optax state of clip_by_global_norm + Adam (replicated)
    envs        VecEnvState, leading axis num_envs (sharded over "data"):
                  state           the env's own state (GameState for HackMatrix)
                  obs             f32[num_envs, obs]  current observation
                  mask            bool[num_envs, actions]  current legal actions
                  episode_return  f32[num_envs]  return so far of the running episode
                  episode_length  i32[num_envs]  steps so far of the running episode;
                                  -1 before the first call (no game yet)
    key         u32[2]: raw threefry key data; the next update's randomness
    update      i32[]: PPO updates done
    env_steps   u32[2]: env steps done, as (low, high) 32-bit words; see `total_env_steps`

To checkpoint, fetch the leaves with `hm.train.mesh.to_host` (works on any process
count) and serialise them, e.g. with `eqx.tree_serialise_leaves`. To restore, build a
template with `abstract_train_state(resolved, env)`, deserialise into it, and place it
with `hm.train.mesh.to_global(host_tree, train_state_shardings(template, mesh))`.

Changing the batch layout (a different num_envs or device count): `reshard_for` keeps
the parameters and counters, re-initialises the optimizer state and starts fresh games.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array, Bool, Float, Int32, Key, PRNGKeyArray, PyTree, UInt32

from hm.train import distributions, ppo
from hm.train.config import ResolvedConfig
from hm.train.envs import (
    AbstractEnv,
    HackMatrixEnv,
    VecEnvState,
    vector_start,
    vector_step,
    vector_unstarted,
)
from hm.train.mesh import DATA_AXIS, make_mesh, to_global, to_host
from hm.train.network import Network, evaluate
from hm.train.precision import cast_floating, compute_dtype


class TrainState(eqx.Module):
    """Everything a run carries from one call to the next (see the module docstring)."""

    params: Network
    opt_state: PyTree
    envs: VecEnvState
    key: UInt32[Array, "2"]
    update: Int32[Array, ""]
    env_steps: UInt32[Array, "2"]


class Trajectory(eqx.Module):
    """Transitions of one step ([n] leaves) or, stacked by the rollout scan, [T, n]."""

    obs: PyTree                               # compact observation (env.encode_obs)
    mask: Bool[Array, "*T n actions"]         # legal actions when sampling
    action: Int32[Array, "*T n"]
    log_prob: Float[Array, "*T n"]
    value: Float[Array, "*T n"]
    reward: Float[Array, "*T n"]
    done: Bool[Array, "*T n"]
    truncated: Bool[Array, "*T n"]
    bootstrap_value: Float[Array, "*T n"]     # value of the truncated state's observation


class StepStats(eqx.Module):
    """Sums over this device's env slots for one step (or a rollout)."""

    episodes: Int32[Array, ""]
    episode_return: Float[Array, ""]
    episode_length: Float[Array, ""]
    episode_stage: Float[Array, ""]
    max_stage: Int32[Array, ""]
    wins: Int32[Array, ""]
    reward_terms: Float[Array, " terms"]
    actions: Float[Array, " actions"]
    legal: Float[Array, " actions"]           # steps where each action was legal


class Samples(eqx.Module):
    """What the epochs train on: the rollout with its advantages, leading axes [T, n]."""

    obs: PyTree
    mask: Bool[Array, "T n actions"]
    action: Int32[Array, "T n"]
    log_prob: Float[Array, "T n"]
    advantage: Float[Array, "T n"]
    target: Float[Array, "T n"]


def make_optimizer(config: ResolvedConfig) -> optax.GradientTransformation:
    """Global-norm clipping then Adam at a constant learning rate."""
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                       optax.adam(config.lr, eps=1e-5))


def _add_steps(counter: UInt32[Array, "2"], amount: int) -> UInt32[Array, "2"]:
    low = counter[0] + jnp.uint32(amount)
    high = counter[1] + (low < counter[0]).astype(jnp.uint32)
    return jnp.stack([low, high])


def total_env_steps(train_state: TrainState) -> int:
    """The env-step counter as a Python int (host side)."""
    low, high = (int(x) for x in to_host(train_state.env_steps))
    return low + (high << 32)


def _key(data: UInt32[Array, "2"]) -> PRNGKeyArray:
    return jax.random.wrap_key_data(data, impl="threefry2x32")


def _fold_in_each(key: PRNGKeyArray, ids: Int32[Array, " n"]) -> Key[Array, " n"]:
    return jax.vmap(jax.random.fold_in, (None, 0))(key, ids)


class Learner(eqx.Module):
    """PPO with its hyper-parameters; pure methods on one device's share of the work.

    `axis_name` is the mesh axis when running under `shard_map` (means become global,
    env ids are offset by the device index); `None` runs on a single device without
    collectives, which the unit tests use.
    """

    env: AbstractEnv
    config: ResolvedConfig = eqx.field(static=True)
    axis_name: str | None = eqx.field(static=True, default=None)

    # --- layout -----------------------------------------------------------------------

    @property
    def local_envs(self) -> int:
        return self.config.num_envs if self.axis_name is None else self.config.envs_per_device

    @property
    def group_size(self) -> int:
        """Env slots per minibatch group: g = M / gcd(M, T) (see `minibatch_indices`)."""
        m, t = self.config.num_minibatches, self.config.num_steps
        return m // math.gcd(m, t)

    def _device_index(self) -> Int32[Array, ""]:
        return jnp.int32(0) if self.axis_name is None else lax.axis_index(self.axis_name)

    def env_ids(self) -> Int32[Array, " n"]:
        """Global indices of this device's env slots."""
        n = self.local_envs
        return self._device_index() * n + jnp.arange(n, dtype=jnp.int32)

    def _across_devices(self, stats: "StepStats") -> "StepStats":
        """Totals over every device (the maximum for `max_stage`)."""
        if self.axis_name is None:
            return stats
        max_stage = lax.pmax(stats.max_stage, self.axis_name)
        stats = lax.psum(stats, self.axis_name)
        return eqx.tree_at(lambda s: s.max_stage, stats, max_stage)

    # --- pieces -----------------------------------------------------------------------

    @property
    def optimizer(self) -> optax.GradientTransformation:
        return make_optimizer(self.config)

    def init_params(self, key: PRNGKeyArray) -> Network:
        return Network(self.env.obs_size, self.env.num_actions, self.config.hidden_dim,
                       self.config.num_layers, kind=self.config.network, critic=self.config.critic, key=key)

    def init_envs(self) -> VecEnvState:
        """Slots with no game yet: the first rollout starts them (`vector_start`)."""
        return vector_unstarted(self.env, self.local_envs)

    def truncation_values(self, params: Network, final_obs: Float[Array, "n obs"],
                          truncated: Bool[Array, " n"]) -> Float[Array, " n"]:
        """Values of the observations where episodes were truncated; 0 elsewhere.

        Truncations are rare, so the network runs on a compacted handful of rows; if
        more slots than that truncate in one step (all slots started together and
        survived), it runs on all of them.
        """
        n = final_obs.shape[0]
        capacity = min(n, 8 + -(-4 * n // self.config.max_episode_steps))
        count = jnp.sum(truncated, dtype=jnp.int32)

        zeros = jnp.zeros_like(final_obs[:, 0])

        def none():
            return zeros

        def few():
            rows = jnp.nonzero(truncated, size=capacity, fill_value=0)[0]
            _, values = evaluate(params, final_obs[rows], self.config.precision)
            values = jnp.where(jnp.arange(capacity) < count, values, 0.0)
            return zeros.at[rows].add(values)

        def every():
            _, values = evaluate(params, final_obs, self.config.precision)
            return jnp.where(truncated, values, 0.0)

        branch = jnp.where(count == 0, 0, jnp.where(count <= capacity, 1, 2))
        return lax.switch(branch, (none, few, every))

    def rollout(
        self, params: Network, envs: VecEnvState, key: PRNGKeyArray
    ) -> tuple[VecEnvState, Trajectory, StepStats]:
        """`num_steps` steps of every env slot under the current policy."""
        start_key, steps_key = jax.random.split(key)
        ids = self.env_ids()
        envs = vector_start(self.env, envs, _fold_in_each(start_key, ids))
        policy_params = cast_floating(params, compute_dtype(self.config.precision))
        num_actions = self.env.num_actions

        def step(envs: VecEnvState, t):
            action_key, env_key = jax.random.split(jax.random.fold_in(steps_key, t))
            logits, value = evaluate(policy_params, envs.obs, self.config.precision)
            uniform = jax.vmap(jax.random.uniform)(_fold_in_each(action_key, ids))
            action = distributions.sample(logits, envs.mask, uniform)
            log_prob = distributions.log_prob(logits, envs.mask, action)
            new_envs, out = vector_step(self.env, envs, action, _fold_in_each(env_key, ids),
                                        self.config.max_episode_steps)
            bootstrap = self.truncation_values(policy_params, out.final_obs, out.truncated)
            transition = Trajectory(
                obs=jax.vmap(self.env.encode_obs)(envs.obs), mask=envs.mask, action=action,
                log_prob=log_prob, value=value, reward=out.reward, done=out.done,
                truncated=out.truncated, bootstrap_value=bootstrap)
            finished = out.done | out.truncated
            stats = StepStats(
                episodes=jnp.sum(finished, dtype=jnp.int32),
                episode_return=jnp.sum(jnp.where(finished, out.episode_return, 0.0)),
                episode_length=jnp.sum(jnp.where(finished, out.episode_length, 0).astype(jnp.float32)),
                episode_stage=jnp.sum(jnp.where(finished, out.info.stage, 0).astype(jnp.float32)),
                max_stage=jnp.max(jnp.where(finished, out.info.stage, 0)),
                wins=jnp.sum(finished & out.info.won, dtype=jnp.int32),
                reward_terms=jnp.sum(out.info.reward_terms, axis=0),
                actions=jnp.sum(jax.nn.one_hot(action, num_actions, dtype=jnp.float32), axis=0),
                legal=jnp.sum(envs.mask, axis=0, dtype=jnp.float32),
            )
            return new_envs, (transition, stats)

        steps = jnp.arange(self.config.num_steps, dtype=jnp.int32)
        envs, (trajectory, stats) = lax.scan(step, envs, steps)
        totals = jax.tree.map(lambda x: jnp.sum(x, axis=0), stats)
        totals = eqx.tree_at(lambda s: s.max_stage, totals, jnp.max(stats.max_stage))
        return envs, trajectory, totals

    def minibatch_indices(self, key: PRNGKeyArray) -> Int32[Array, "M G S"]:
        """This epoch's assignment of samples to minibatches.

        The samples of each group of g consecutive env slots (g = M / gcd(M, T), 1 when
        M divides T) are shuffled with a key of the group's global index; minibatch j
        takes ranks [j*T*g/M, (j+1)*T*g/M) of every group. So every minibatch holds an
        equal share of every device's samples (the gradient needs no data movement)
        and its contents do not depend on the device count.
        """
        n, t, m = self.local_envs, self.config.num_steps, self.config.num_minibatches
        g = self.group_size
        groups, size = n // g, t * g
        group_ids = self._device_index() * groups + jnp.arange(groups, dtype=jnp.int32)
        perms = jax.vmap(lambda k: jax.random.permutation(k, size))(_fold_in_each(key, group_ids))
        return jnp.transpose(perms.reshape(groups, m, size // m).astype(jnp.int32), (1, 0, 2))

    def minibatch(self, samples: "Samples", indices: Int32[Array, "G S"]) -> ppo.Minibatch:
        """Gather one minibatch: sample s of group G is step s // g of slot G*g + s % g.

        Gathering straight from the rollout's [T, n] layout avoids a transposed copy of
        the whole observation buffer.
        """
        g = self.group_size
        step = indices // g
        slot = jnp.arange(indices.shape[0], dtype=jnp.int32)[:, None] * g + indices % g

        def take(x):
            picked = x[step, slot]
            return picked.reshape((-1,) + picked.shape[2:])

        picked = jax.tree.map(take, samples)
        return ppo.Minibatch(obs=jax.vmap(self.env.decode_obs)(picked.obs), mask=picked.mask,
                             action=picked.action, log_prob=picked.log_prob,
                             advantage=picked.advantage, target=picked.target)

    def gradient_step(self, params: Network, opt_state: PyTree, batch: ppo.Minibatch):
        coefficients = ppo.LossCoefficients(clip_eps=self.config.clip_eps, vf_coef=self.config.vf_coef,
                                            ent_coef=self.config.ent_coef)
        grad_fn = eqx.filter_value_and_grad(ppo.loss, has_aux=True)
        (_, metrics), grads = grad_fn(params, batch, coefficients, self.config.precision, self.axis_name)
        if self.axis_name is not None:
            grads = lax.pmean(grads, self.axis_name)
        metrics["ppo/grad_norm"] = ppo.global_norm(grads)
        # optax mixes Python floats with its int32 step count: not strict-promotion clean
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = self.optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, metrics

    def train_epochs(self, params: Network, opt_state: PyTree, samples: Samples, key: PRNGKeyArray):
        """`update_epochs` passes over the samples, `num_minibatches` steps each."""

        def epoch(carry, epoch_key):
            def minibatch(carry, indices):
                params, opt_state = carry
                params, opt_state, metrics = self.gradient_step(params, opt_state, self.minibatch(samples, indices))
                return (params, opt_state), metrics

            return lax.scan(minibatch, carry, self.minibatch_indices(epoch_key))

        keys = jax.random.split(key, self.config.update_epochs)
        (params, opt_state), metrics = lax.scan(epoch, (params, opt_state), keys)
        return params, opt_state, jax.tree.map(jnp.mean, metrics)

    # --- one update, one call -----------------------------------------------------------

    def update(self, state: TrainState) -> tuple[TrainState, tuple[dict[str, Array], StepStats]]:
        """One PPO update: rollout, GAE, epochs of minibatch steps.

        Returns the new state, the update's loss metrics (means over its minibatch
        steps) and its rollout statistics (totals over every device).
        """
        config = self.config
        next_key, rollout_key, epochs_key = jax.random.split(_key(state.key), 3)
        envs, trajectory, stats = self.rollout(state.params, state.envs, rollout_key)
        _, last_value = evaluate(state.params, envs.obs, config.precision)
        advantages, targets = ppo.gae(trajectory.reward, trajectory.value, trajectory.done,
                                      trajectory.truncated, trajectory.bootstrap_value, last_value,
                                      config.gamma, config.gae_lambda)
        samples = Samples(obs=trajectory.obs, mask=trajectory.mask, action=trajectory.action,
                          log_prob=trajectory.log_prob, advantage=advantages, target=targets)
        params, opt_state, metrics = self.train_epochs(state.params, state.opt_state, samples, epochs_key)
        metrics["ppo/explained_variance"] = ppo.explained_variance(trajectory.value, targets, self.axis_name)
        metrics["ppo/lr"] = jnp.float32(config.lr)
        stats = self._across_devices(stats)
        new_state = TrainState(params=params, opt_state=opt_state, envs=envs,
                               key=jax.random.key_data(next_key), update=state.update + 1,
                               env_steps=_add_steps(state.env_steps, config.batch_size))
        return new_state, (metrics, stats)

    def chunk(self, state: TrainState) -> tuple[TrainState, dict[str, Array]]:
        """`updates_per_call` updates; metrics averaged over them (episodes pooled)."""
        config = self.config

        state, (metrics, stats) = lax.scan(lambda s, _: self.update(s), state, None,
                                           length=config.updates_per_call)
        out = jax.tree.map(jnp.mean, metrics)
        out.update(self._episode_metrics(stats))
        out["env_steps"] = jnp.int32(config.steps_per_call)
        return state, out

    def _episode_metrics(self, stats: StepStats) -> dict[str, Array]:
        total = jax.tree.map(lambda x: jnp.sum(x, axis=0), stats)
        count = total.episodes
        denominator = jnp.maximum(count, 1).astype(jnp.float32)
        steps = jnp.float32(self.config.steps_per_call)
        out = {
            "episode/count": count,
            "episode/return": total.episode_return / denominator,
            "episode/length": total.episode_length / denominator,
            "episode/highest_stage": total.episode_stage / denominator,
            "episode/max_stage": jnp.max(stats.max_stage),
            "episode/win_rate": total.wins.astype(jnp.float32) / denominator,
        }
        for i, name in enumerate(self.env.reward_terms):
            out[f"reward/{name}"] = total.reward_terms[i] / steps
        out.update(self.env.action_metrics(total.actions / steps))
        # The same statistics of where each action was legal, as `legal/...` (health checks).
        out.update({"legal/" + name.removeprefix("actions/"): value
                    for name, value in self.env.action_metrics(total.legal / steps).items()})
        return out


# --- building, placing and running -------------------------------------------------------


def _key_data(key, seed: int) -> np.ndarray:
    """Raw threefry key data, on the host, from a key, key data, an int seed or None."""
    if key is None:
        key = seed
    if isinstance(key, int):
        if not 0 <= key < 2**32:
            raise ValueError(f"seed must be in [0, 2^32); got {key}")
        return np.array([0, key], np.uint32)  # what jax.random.key(seed) holds
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.asarray(key, np.uint32)


def _specs(state: TrainState) -> TrainState:
    """PartitionSpecs: env slots split over the data axis, everything else replicated."""
    replicated = jax.tree.map(lambda _: PartitionSpec(), state)
    sharded = jax.tree.map(lambda _: PartitionSpec(DATA_AXIS), state.envs)
    return eqx.tree_at(lambda s: s.envs, replicated, sharded)


def train_state_shardings(state: TrainState, mesh: Mesh) -> TrainState:
    """A tree of `NamedSharding`s matching `state` (or its abstract template)."""
    return jax.tree.map(lambda spec: NamedSharding(mesh, spec), _specs(state))


def _params_and_opt_state(learner: Learner, key_data: UInt32[Array, "2"]) -> tuple[Network, PyTree]:
    params = learner.init_params(_key(key_data))
    return params, learner.optimizer.init(params)


def abstract_train_state(resolved: ResolvedConfig, env: AbstractEnv | None = None) -> TrainState:
    """The shapes and dtypes of a TrainState (`jax.ShapeDtypeStruct` leaves): a template."""
    learner = Learner(env=env if env is not None else HackMatrixEnv(), config=resolved)

    def build(key_data):
        params, opt_state = _params_and_opt_state(learner, key_data)
        return TrainState(params=params, opt_state=opt_state, envs=learner.init_envs(),
                          key=key_data, update=jnp.int32(0), env_steps=jnp.zeros((2,), jnp.uint32))

    return jax.eval_shape(build, jax.ShapeDtypeStruct((2,), jnp.uint32))


def init(resolved: ResolvedConfig, key=None, *, env: AbstractEnv | None = None,
         mesh: Mesh | None = None) -> TrainState:
    """A new TrainState on the mesh: fresh network and optimizer state, empty env slots.

    Every process of a multi-host run calls this with the same arguments and gets the
    same global arrays. The env slots hold no game yet: the first rollout starts them
    (so starting a run compiles the game once, in the training program).

    Args:
        resolved: the run's configuration.
        key: a PRNG key, raw key data or an int seed; default `resolved.seed`.
        env: default `HackMatrixEnv()`.
        mesh: default `make_mesh(resolved.devices)`.
    """
    env = env if env is not None else HackMatrixEnv()
    mesh = mesh if mesh is not None else make_mesh(resolved.devices)
    learner = Learner(env=env, config=resolved)
    shardings = train_state_shardings(abstract_train_state(resolved, env), mesh)

    def build(key_data):
        params_key, run_key = jax.random.split(_key(key_data))
        params, opt_state = _params_and_opt_state(learner, jax.random.key_data(params_key))
        return TrainState(params=params, opt_state=opt_state, envs=learner.init_envs(),
                          key=jax.random.key_data(run_key), update=jnp.int32(0),
                          env_steps=jnp.zeros((2,), jnp.uint32))

    # one small program: every process computes the same replicated values and zeros
    key_data = to_global(_key_data(key, resolved.seed), shardings.key)
    return jax.jit(build, out_shardings=shardings)(key_data)


def reshard_for(train_state: TrainState, resolved: ResolvedConfig, key=None, *,
                env: AbstractEnv | None = None, mesh: Mesh | None = None) -> TrainState:
    """Continue with a different batch layout (num_envs, device or host count).

    Keeps the parameters and the update and env-step counters; re-initialises the
    optimizer state (its moments were tuned to the old batch) and starts fresh games;
    draws a new run key from `key` (default: `resolved.seed` folded with the update
    count, so a resumed run does not repeat its earlier randomness).
    """
    env = env if env is not None else HackMatrixEnv()
    mesh = mesh if mesh is not None else make_mesh(resolved.devices)
    host = to_host((train_state.params, train_state.update, train_state.env_steps))
    params, update, env_steps = host
    if key is None:
        key = jax.random.fold_in(jax.random.key(resolved.seed, impl="threefry2x32"), int(update))
    fresh = init(resolved, key, env=env, mesh=mesh)
    shardings = train_state_shardings(fresh, mesh)
    params = to_global(params, shardings.params)
    learner = Learner(env=env, config=resolved)
    opt_state = jax.jit(learner.optimizer.init, out_shardings=shardings.opt_state)(params)
    return TrainState(params=params, opt_state=opt_state, envs=fresh.envs, key=fresh.key,
                      update=to_global(update, shardings.update),
                      env_steps=to_global(env_steps, shardings.env_steps))


def make_train_fn(resolved: ResolvedConfig, env: AbstractEnv | None = None, mesh: Mesh | None = None):
    """The fused training program: `train_chunk(train_state) -> (train_state, metrics)`.

    One call runs `resolved.updates_per_call` PPO updates on every device of `mesh`.
    The input TrainState is donated: use only the returned one afterwards. It compiles
    on the first call and never again for the same shapes and shardings.

    Metrics (replicated scalars): `loss/{total,policy,value,entropy}`,
    `ppo/{approx_kl,clip_frac,explained_variance,grad_norm,lr}` averaged over every
    minibatch step of the call; `episode/{return,length,highest_stage,win_rate}` means
    over the episodes that finished during the call (`episode/count` of them; 0 when
    none did), `episode/max_stage` the highest stage any of them reached;
    `reward/<term>` each reward term's mean per env step; `actions/...` fractions of env
    steps (see the env's `action_metrics`), `legal/...` the same of the legal actions;
    `env_steps` the env steps of this call.
    """
    env = env if env is not None else HackMatrixEnv()
    mesh = mesh if mesh is not None else make_mesh(resolved.devices)
    if mesh.devices.size != resolved.devices:
        raise ValueError(f"the mesh has {mesh.devices.size} devices but the config was resolved "
                         f"for {resolved.devices}")
    learner = Learner(env=env, config=resolved, axis_name=DATA_AXIS)
    template = abstract_train_state(resolved, env)
    specs = _specs(template)
    # check_vma=False: the env's own scans need not be written for shard_map's
    # replication typing; the learner averages gradients explicitly (see ppo.loss).
    chunk = jax.shard_map(learner.chunk, mesh=mesh, in_specs=(specs,), out_specs=(specs, PartitionSpec()),
                          check_vma=False)
    # Explicit shardings, the same as `init` gives: the output feeds the next call
    # unchanged, so the program never recompiles.
    shardings = train_state_shardings(template, mesh)
    return jax.jit(chunk, donate_argnums=0, in_shardings=(shardings,),
                   out_shardings=(shardings, NamedSharding(mesh, PartitionSpec())))
