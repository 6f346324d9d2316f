"""The learner: K whole PPO updates fused into one compiled, multi-device program.

One call of the function from `make_train_fn` runs `updates_per_call` (K) updates:

    scan over K updates:
        start the env slots that hold no game yet (only before the first update)
        scan over num_steps: policy forward, inverse-CDF sampling, env step with
            truncation and auto-reset (`hm.env`); store compact observations and what
            the training features label (e.g. the teacher's actions)
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

Populations. A run trains P members (P = 1 for a single run; `--num-seeds`, `--sweep`):
every per-member leaf of the state leads with a member axis, and the members'
hyper-parameters (`Hyper`: a dict of the fields of `config.SWEEPABLE`, PPO's, the
curriculum's and the training features') are an argument of the program, traced
values, so members can differ in them and share one compiled program. The rollout steps all members' env
slots as one flat batch; networks and gradient steps are `vmap`ped over members.
Member i of a population computes what the single run with its seed computes.

TrainState fields (what a checkpoint holds; every leaf is a `jax.Array`):

    params      Network, each leaf [P, ...]: float32 master weights (replicated)
    opt_state   optax state of clip_by_global_norm + Adam, leaves [P, ...] (replicated)
    envs        VecEnvState, leading axes [P, num_envs] (env slots sharded over "data"):
                  state           the env's own state (GameState for HackMatrix)
                  obs             f32[P, num_envs, obs]  current observation
                  mask            bool[P, num_envs, actions]  current legal actions
                  episode_return  f32[P, num_envs]  return so far of the running episode
                  episode_length  i32[P, num_envs]  steps so far of the running episode;
                                  -1 before the first call (no game yet)
    key         u32[P, 2]: raw threefry key data; each member's next update's randomness
    update      i32[]: PPO updates done (every member has done as many)
    env_steps   u32[2]: env steps done by each member, as (low, high) 32-bit words;
                see `total_env_steps`

To checkpoint, fetch the leaves with `hm.train.mesh.to_host` (works on any process
count) and serialise them, e.g. with `eqx.tree_serialise_leaves`. To restore, build a
template with `abstract_train_state(resolved, env)`, deserialise into it, and place it
with `hm.train.mesh.to_global(host_tree, train_state_shardings(template, mesh))`.

Changing the batch layout (a different num_envs or device count): `reshard_for` keeps
the parameters and counters, re-initialises the optimizer state and starts fresh games.
"""

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array, Bool, Float, Int32, Key, PRNGKeyArray, PyTree, UInt32

from hm.env import Environment, HackMatrix
from hm.train import config as config_lib
from hm.train import distributions, features, ppo, vector
from hm.train.config import ResolvedConfig
from hm.train.features import Feature, Hyper
from hm.train.mesh import DATA_AXIS, make_mesh, to_global, to_host
from hm.train.network import Network, evaluate
from hm.train.precision import cast_floating, compute_dtype
from hm.train.vector import VecEnvState, vector_start, vector_step, vector_unstarted


class TrainState(eqx.Module):
    """Everything a run carries from one call to the next (see the module docstring)."""

    params: Network
    opt_state: PyTree
    envs: VecEnvState
    key: UInt32[Array, "P 2"]
    update: Int32[Array, ""]
    env_steps: UInt32[Array, "2"]


def make_hyper(resolved: ResolvedConfig) -> Hyper:
    """The members' hyper-parameters ([P] each, in member order, `config.members`), on the
    host: every field of `config.SWEEPABLE`. Traced in the program."""
    members = config_lib.members(resolved)

    def dtype(name):
        return np.int32 if name in config_lib.INTEGER_SWEEPABLE else np.float32

    return {name: np.array([m.hyper[name] for m in members], dtype(name)) for name in config_lib.SWEEPABLE}


class Trajectory(eqx.Module):
    """Transitions of one step ([P, n] leaves) or, stacked by the rollout scan, [T, P, n]."""

    obs: PyTree                               # compact observation (env.encode_obs)
    mask: Bool[Array, "*T P n actions"]       # legal actions when sampling
    action: Int32[Array, "*T P n"]
    log_prob: Float[Array, "*T P n"]
    value: Float[Array, "*T P n"]
    reward: Float[Array, "*T P n"]
    done: Bool[Array, "*T P n"]
    truncated: Bool[Array, "*T P n"]
    bootstrap_value: Float[Array, "*T P n"]   # value of the truncated state's observation
    extras: dict[str, Array]                  # what the training features labelled (`Feature.labels`)


class StepStats(eqx.Module):
    """Sums over this device's env slots of each member for one step (or a rollout)."""

    episodes: Int32[Array, " P"]
    episode_return: Float[Array, " P"]
    episode_length: Float[Array, " P"]
    episode_stage: Float[Array, " P"]
    max_stage: Int32[Array, " P"]
    wins: Int32[Array, " P"]
    reward_terms: Float[Array, "P terms"]
    actions: Float[Array, "P actions"]
    legal: Float[Array, "P actions"]          # steps where each action was legal


class Samples(eqx.Module):
    """What one member's epochs train on: its rollout with advantages, axes [T, n]."""

    obs: PyTree
    mask: Bool[Array, "T n actions"]
    action: Int32[Array, "T n"]
    log_prob: Float[Array, "T n"]
    advantage: Float[Array, "T n"]
    target: Float[Array, "T n"]
    extras: dict[str, Array]


def make_optimizer(lr, max_grad_norm) -> optax.GradientTransformation:
    """Global-norm clipping then Adam at a constant learning rate (numbers or traced)."""
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(lr, eps=1e-5))


def _add_steps(counter: UInt32[Array, "2"], amount: int) -> UInt32[Array, "2"]:
    low = counter[0] + jnp.uint32(amount)
    high = counter[1] + (low < counter[0]).astype(jnp.uint32)
    return jnp.stack([low, high])


def total_env_steps(train_state: TrainState) -> int:
    """The env-step counter (per member) as a Python int (host side)."""
    low, high = (int(x) for x in to_host(train_state.env_steps))
    return low + (high << 32)


def _key(data: UInt32[Array, "2"]) -> PRNGKeyArray:
    return jax.random.wrap_key_data(data, impl="threefry2x32")


def _fold_in_each(key: PRNGKeyArray, ids: Int32[Array, " n"]) -> Key[Array, " n"]:
    return jax.vmap(jax.random.fold_in, (None, 0))(key, ids)


def member_of(tree: PyTree, index: int) -> PyTree:
    """Member `index`'s part of a population tree (params, opt_state, metrics...)."""
    return jax.tree.map(lambda x: x[index], tree)


def _flat(tree: PyTree) -> PyTree:
    """[P, n, ...] leaves as [P * n, ...]: every member's env slots as one batch."""
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tree)


def _unflat(tree: PyTree, members: int) -> PyTree:
    return jax.tree.map(lambda x: x.reshape((members, -1) + x.shape[1:]), tree)


class Learner(eqx.Module):
    """PPO with its hyper-parameters; pure methods on one device's share of the work.

    Every method works on a population: arrays lead with the member axis P (1 for a
    single run). The rollout steps every member's env slots as one flat batch of
    P * n games, so the engine's batch-level rules see one batch (a `vmap` over members
    around them would turn their batch-level skipping into selects); the networks,
    advantages and gradient steps are `jax.vmap`ped over members.

    `axis_name` is the mesh axis when running under `shard_map` (means become global,
    env ids are offset by the device index); `None` runs on a single device without
    collectives, which the unit tests use. `features` are the active training features
    (`hm.train.features.build`), whose hooks the update calls.
    """

    env: Environment
    config: ResolvedConfig = eqx.field(static=True)
    axis_name: str | None = eqx.field(static=True, default=None)
    features: tuple[Feature, ...] = ()

    # --- layout -----------------------------------------------------------------------

    @property
    def members(self) -> int:
        return self.config.num_members

    @property
    def local_envs(self) -> int:
        """This device's env slots of each member."""
        return self.config.num_envs if self.axis_name is None else self.config.envs_per_device

    @property
    def group_size(self) -> int:
        """Env slots per minibatch group: g = M / gcd(M, T) (see `minibatch_indices`)."""
        m, t = self.config.num_minibatches, self.config.num_steps
        return m // math.gcd(m, t)

    def _device_index(self) -> Int32[Array, ""]:
        return jnp.int32(0) if self.axis_name is None else lax.axis_index(self.axis_name)

    def env_ids(self) -> Int32[Array, " n"]:
        """Global indices of this device's env slots (the same for every member)."""
        n = self.local_envs
        return self._device_index() * n + jnp.arange(n, dtype=jnp.int32)

    def per_env_keys(self, keys: Key[Array, " P"]) -> Key[Array, "P n"]:
        """Each member's key folded with each global env slot index."""
        ids = self.env_ids()
        return jax.vmap(lambda key: _fold_in_each(key, ids))(keys)

    def _across_devices(self, stats: "StepStats") -> "StepStats":
        """Totals over every device (the maximum for `max_stage`)."""
        if self.axis_name is None:
            return stats
        max_stage = lax.pmax(stats.max_stage, self.axis_name)
        stats = lax.psum(stats, self.axis_name)
        return eqx.tree_at(lambda s: s.max_stage, stats, max_stage)

    def _evaluate(self, params: Network, obs: Float[Array, "P n obs"]):
        """Each member's network on its own observations: logits [P, n, A], values [P, n]."""
        return jax.vmap(lambda p, o: evaluate(p, o, self.config.precision))(params, obs)

    # --- pieces -----------------------------------------------------------------------

    @property
    def optimizer_structure(self) -> optax.GradientTransformation:
        """The optimizer with placeholder numbers: its state's structure is all `init` needs."""
        return make_optimizer(1.0, 1.0)

    def init_params(self, key: PRNGKeyArray) -> Network:
        """One member's network."""
        (obs_size,) = self.env.observation_shape
        return Network(obs_size, self.env.num_actions, self.config.hidden_dim, self.config.num_layers,
                       kind=self.config.network, critic=self.config.critic,
                       value_transform=self.config.value_transform, key=key)

    def init_envs(self) -> VecEnvState:
        """Slots with no game yet, [P, n]: the first rollout starts them (`vector_start`)."""
        unstarted = vector_unstarted(self.env, self.local_envs)
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (self.members,) + x.shape), unstarted)

    def truncation_values(self, params: Network, final_obs: Float[Array, "P n obs"],
                          truncated: Bool[Array, "P n"]) -> Float[Array, "P n"]:
        """Values of the observations where episodes were truncated; 0 elsewhere.

        Truncations are rare, so each member's network runs on a compacted handful of
        its rows; if more slots than that truncate in one step (all slots started
        together and survived), it runs on all of them. The branch is chosen for the
        whole population (by its member with the most truncations), so it stays a real
        branch rather than a select of all three.
        """
        n = final_obs.shape[1]
        capacity = min(n, 8 + -(-4 * n // self.config.max_episode_steps))
        counts = jnp.sum(truncated, axis=1, dtype=jnp.int32)
        zeros = jnp.zeros(truncated.shape, jnp.float32)

        def none():
            return zeros

        def few():
            def member(p, obs, cut, count):
                rows = jnp.nonzero(cut, size=capacity, fill_value=0)[0]
                _, values = evaluate(p, obs[rows], self.config.precision)
                values = jnp.where(jnp.arange(capacity) < count, values, 0.0)
                return jnp.zeros(n, jnp.float32).at[rows].add(values)

            return jax.vmap(member)(params, final_obs, truncated, counts)

        def every():
            _, values = self._evaluate(params, final_obs)
            return jnp.where(truncated, values, 0.0)

        most = jnp.max(counts)
        branch = jnp.where(most == 0, 0, jnp.where(most <= capacity, 1, 2))
        return lax.switch(branch, (none, few, every))

    def rollout(
        self, params: Network, envs: VecEnvState, keys: Key[Array, " P"], hyper: Hyper
    ) -> tuple[VecEnvState, Trajectory, StepStats]:
        """`num_steps` steps of every env slot of every member under its policy; new
        episodes start as the member's curriculum settings (`hyper`) ask."""
        members = self.members
        split = jax.vmap(jax.random.split)(keys)
        start_keys, steps_keys = split[:, 0], split[:, 1]
        # Each member's curriculum settings, one per env slot of the flat batch.
        curriculum = (jnp.repeat(hyper["curriculum"], self.local_envs),
                      jnp.repeat(hyper["curriculum_max_stage"], self.local_envs))
        envs = _unflat(vector_start(self.env, _flat(envs), _flat(self.per_env_keys(start_keys)),
                                    *curriculum), members)
        policy_params = cast_floating(params, compute_dtype(self.config.precision))
        num_actions = self.env.num_actions

        def step(envs: VecEnvState, t):
            both = jax.vmap(lambda key: jax.random.split(jax.random.fold_in(key, t)))(steps_keys)
            action_keys, env_keys = both[:, 0], both[:, 1]
            logits, value = self._evaluate(policy_params, envs.obs)
            uniform = jax.vmap(jax.vmap(jax.random.uniform))(self.per_env_keys(action_keys))
            action = distributions.sample(logits, envs.mask, uniform)
            log_prob = distributions.log_prob(logits, envs.mask, action)
            new_envs, out = vector_step(self.env, _flat(envs), action.reshape(-1),
                                        _flat(self.per_env_keys(env_keys)),
                                        self.config.max_episode_steps, *curriculum)
            extras = {}
            for feature in self.features:
                extras.update(feature.labels(self, policy_params, envs, steps_keys, t, hyper))
            new_envs, out = _unflat(new_envs, members), _unflat(out, members)
            bootstrap = self.truncation_values(policy_params, out.final_obs, out.truncated)
            # what the learner maximises: the env's reward, as the features change it
            reward = out.reward
            for feature in self.features:
                reward = feature.reward(reward, envs, out, hyper)
            transition = Trajectory(
                obs=jax.vmap(jax.vmap(self.env.compact_observation))(envs.obs), mask=envs.mask,
                action=action, log_prob=log_prob, value=value, reward=reward, done=out.done,
                truncated=out.truncated, bootstrap_value=bootstrap, extras=extras)
            finished = out.done | out.truncated
            stats = StepStats(
                episodes=jnp.sum(finished, axis=1, dtype=jnp.int32),
                episode_return=jnp.sum(jnp.where(finished, out.episode_return, 0.0), axis=1),
                episode_length=jnp.sum(jnp.where(finished, out.episode_length, 0).astype(jnp.float32), axis=1),
                episode_stage=jnp.sum(jnp.where(finished, out.stage, 0).astype(jnp.float32), axis=1),
                max_stage=jnp.max(jnp.where(finished, out.stage, 0), axis=1),
                wins=jnp.sum(finished & out.won, axis=1, dtype=jnp.int32),
                reward_terms=jnp.sum(out.reward_terms, axis=1),
                actions=jnp.sum(jax.nn.one_hot(action, num_actions, dtype=jnp.float32), axis=1),
                legal=jnp.sum(envs.mask, axis=1, dtype=jnp.float32),
            )
            return new_envs, (transition, stats)

        steps = jnp.arange(self.config.num_steps, dtype=jnp.int32)
        envs, (trajectory, stats) = lax.scan(step, envs, steps)
        totals = jax.tree.map(lambda x: jnp.sum(x, axis=0), stats)
        totals = eqx.tree_at(lambda s: s.max_stage, totals, jnp.max(stats.max_stage, axis=0))
        return envs, trajectory, totals

    def minibatch_indices(self, key: PRNGKeyArray) -> Int32[Array, "M G S"]:
        """One member's assignment of samples to minibatches for one epoch.

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
        return ppo.Minibatch(obs=jax.vmap(self.env.expand_observation)(picked.obs), mask=picked.mask,
                             action=picked.action, log_prob=picked.log_prob,
                             advantage=picked.advantage, target=picked.target, extras=picked.extras)

    def gradient_step(self, params: Network, opt_state: PyTree, batch: ppo.Minibatch, hyper: Hyper):
        """One member's gradient step (`hyper` holds its scalars)."""
        coefficients = ppo.LossCoefficients(clip_eps=hyper["clip_eps"], vf_coef=hyper["vf_coef"],
                                            ent_coef=hyper["ent_coef"])
        grad_fn = eqx.filter_value_and_grad(ppo.loss, has_aux=True)
        (_, metrics), grads = grad_fn(params, batch, coefficients, self.config.precision, self.axis_name,
                                      self.features, hyper)
        if self.axis_name is not None:
            grads = lax.pmean(grads, self.axis_name)
        metrics["ppo/grad_norm"] = ppo.global_norm(grads)
        optimizer = make_optimizer(hyper["lr"], hyper["max_grad_norm"])
        # optax mixes Python floats with its int32 step count: not strict-promotion clean
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, metrics

    def train_epochs(self, params: Network, opt_state: PyTree, samples: Samples, key: PRNGKeyArray,
                     hyper: Hyper):
        """One member's `update_epochs` passes over its samples, `num_minibatches` steps each."""

        def epoch(carry, epoch_key):
            def minibatch(carry, indices):
                params, opt_state = carry
                params, opt_state, metrics = self.gradient_step(
                    params, opt_state, self.minibatch(samples, indices), hyper)
                return (params, opt_state), metrics

            return lax.scan(minibatch, carry, self.minibatch_indices(epoch_key))

        keys = jax.random.split(key, self.config.update_epochs)
        (params, opt_state), metrics = lax.scan(epoch, (params, opt_state), keys)
        return params, opt_state, jax.tree.map(jnp.mean, metrics)

    # --- one update, one call -----------------------------------------------------------

    def update(self, state: TrainState, hyper: Hyper) -> tuple[TrainState, tuple[dict[str, Array], StepStats]]:
        """One PPO update of every member: rollout, GAE, epochs of minibatch steps.

        Returns the new state, the update's loss metrics (each member's means over its
        minibatch steps, [P]) and its rollout statistics (totals over every device).
        """
        config = self.config
        # the features' values at this update's start (e.g. the teacher's annealed weight)
        for feature in self.features:
            hyper = feature.anneal(hyper, state.env_steps)
        split = jax.vmap(lambda data: jax.random.split(_key(data), 3))(state.key)
        next_keys, rollout_keys, epochs_keys = split[:, 0], split[:, 1], split[:, 2]
        envs, trajectory, stats = self.rollout(state.params, state.envs, rollout_keys, hyper)
        _, last_value = self._evaluate(state.params, envs.obs)

        def learn(params, opt_state, trajectory, last_value, key, hyper):
            advantages, targets = ppo.gae(trajectory.reward, trajectory.value, trajectory.done,
                                          trajectory.truncated, trajectory.bootstrap_value, last_value,
                                          hyper["gamma"], hyper["gae_lambda"])
            for feature in self.features:
                params = feature.before_epochs(params, targets, hyper, state.update)
            samples = Samples(obs=trajectory.obs, mask=trajectory.mask, action=trajectory.action,
                              log_prob=trajectory.log_prob, advantage=advantages, target=targets,
                              extras=trajectory.extras)
            params, opt_state, metrics = self.train_epochs(params, opt_state, samples, key, hyper)
            metrics["ppo/explained_variance"] = ppo.explained_variance(trajectory.value, targets,
                                                                       self.axis_name)
            metrics["ppo/lr"] = hyper["lr"]
            for feature in self.features:
                metrics.update(feature.metrics(params, hyper))
            return params, opt_state, metrics

        # The trajectory is [T, P, n]: each member's share is taken along axis 1.
        params, opt_state, metrics = jax.vmap(learn, in_axes=(0, 0, 1, 0, 0, 0))(
            state.params, state.opt_state, trajectory, last_value, epochs_keys, hyper)
        stats = self._across_devices(stats)
        new_state = TrainState(params=params, opt_state=opt_state, envs=envs,
                               key=jax.vmap(jax.random.key_data)(next_keys), update=state.update + 1,
                               env_steps=_add_steps(state.env_steps, config.batch_size))
        return new_state, (metrics, stats)

    def chunk(self, state: TrainState, hyper: Hyper) -> tuple[TrainState, dict[str, Array]]:
        """`updates_per_call` updates; metrics averaged over them (episodes pooled), one
        value per member ([P])."""
        config = self.config

        state, (metrics, stats) = lax.scan(lambda s, _: self.update(s, hyper), state, None,
                                           length=config.updates_per_call)
        out = jax.tree.map(lambda x: jnp.mean(x, axis=0), metrics)
        out.update(self._episode_metrics(stats))
        out["env_steps"] = jnp.int32(config.steps_per_call)
        return state, out

    def _episode_metrics(self, stats: StepStats) -> dict[str, Array]:
        """Per-member episode, reward and action statistics of a call ([K, P] stats in)."""
        total = jax.tree.map(lambda x: jnp.sum(x, axis=0), stats)
        count = total.episodes
        denominator = jnp.maximum(count, 1).astype(jnp.float32)
        steps = jnp.float32(self.config.steps_per_call)
        out = {
            "episode/count": count,
            "episode/return": total.episode_return / denominator,
            "episode/length": total.episode_length / denominator,
            "episode/highest_stage": total.episode_stage / denominator,
            "episode/max_stage": jnp.max(stats.max_stage, axis=0),
            "episode/win_rate": total.wins.astype(jnp.float32) / denominator,
        }
        for i, name in enumerate(vector.reward_terms(self.env)):
            out[f"reward/{name}"] = total.reward_terms[:, i] / steps
        # The env's statistics of the actions taken, as `actions/...`, and of where each
        # action was legal, as `legal/...` (health checks).
        taken = jax.vmap(self.env.action_metrics)(total.actions / steps)
        legal = jax.vmap(self.env.action_metrics)(total.legal / steps)
        out.update({"actions/" + name: value for name, value in taken.items()})
        out.update({"legal/" + name: value for name, value in legal.items()})
        return out


# --- building, placing and running -------------------------------------------------------


def _member_key_data(resolved: ResolvedConfig, key=None) -> np.ndarray:
    """Raw threefry key data [P, 2] of each member, on the host.

    By default member i's key is `jax.random.key(seed_i)` for its seed (`config.members`),
    so a member of a population starts exactly as the single run with its seed. `key`
    (a key, key data, or an int seed; one per member with a leading axis, or one for a
    single-member run) overrides that.
    """
    if key is None:
        return np.array([[0, m.seed] for m in config_lib.members(resolved)], np.uint32)
    if isinstance(key, int):
        if not 0 <= key < 2**32:
            raise ValueError(f"seed must be in [0, 2^32); got {key}")
        key = np.array([0, key], np.uint32)  # what jax.random.key(seed) holds
    elif jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    key = np.asarray(key, np.uint32).reshape(-1, 2)
    if key.shape[0] != resolved.num_members:
        raise ValueError(f"{key.shape[0]} key(s) for a population of {resolved.num_members}: give one "
                         "per member, or none for each member's own seed")
    return key


def _specs(state: TrainState) -> TrainState:
    """PartitionSpecs: every member's env slots split over the data axis, the rest replicated."""
    replicated = jax.tree.map(lambda _: PartitionSpec(), state)
    sharded = jax.tree.map(lambda _: PartitionSpec(None, DATA_AXIS), state.envs)
    return eqx.tree_at(lambda s: s.envs, replicated, sharded)


def train_state_shardings(state: TrainState, mesh: Mesh) -> TrainState:
    """A tree of `NamedSharding`s matching `state` (or its abstract template)."""
    return jax.tree.map(lambda spec: NamedSharding(mesh, spec), _specs(state))


def hyper_shardings(resolved: ResolvedConfig, mesh: Mesh) -> Hyper:
    """`Hyper` is replicated: every device runs every member."""
    return jax.tree.map(lambda _: NamedSharding(mesh, PartitionSpec()), make_hyper(resolved))


def _build(learner: Learner, key_data: UInt32[Array, "P 2"]) -> TrainState:
    """A fresh state: each member's network and optimizer state from its own key.

    The members' networks are built one after another (`lax.map`), not `vmap`ped: the
    orthogonal initialiser's QR, batched over members, is jaxlib's batched LAPACK kernel,
    which splits the batch over XLA's CPU thread pool and waits for it; with two such
    kernels in one program on a 2-thread pool each holds a thread waiting for the other's
    (jaxlib 0.10.2), and `init` never returned. Built one at a time, each QR is unbatched.
    """

    def member(data):
        params_key, run_key = jax.random.split(_key(data))
        params = learner.init_params(params_key)
        return params, learner.optimizer_structure.init(params), jax.random.key_data(run_key)

    params, opt_state, run_keys = lax.map(member, key_data)
    return TrainState(params=params, opt_state=opt_state, envs=learner.init_envs(), key=run_keys,
                      update=jnp.int32(0), env_steps=jnp.zeros((2,), jnp.uint32))


def abstract_train_state(resolved: ResolvedConfig, env: Environment | None = None) -> TrainState:
    """The shapes and dtypes of a TrainState (`jax.ShapeDtypeStruct` leaves): a template."""
    learner = Learner(env=env if env is not None else HackMatrix(), config=resolved)
    return jax.eval_shape(lambda data: _build(learner, data),
                          jax.ShapeDtypeStruct((resolved.num_members, 2), jnp.uint32))


def init(resolved: ResolvedConfig, key=None, *, env: Environment | None = None,
         mesh: Mesh | None = None) -> TrainState:
    """A new TrainState on the mesh: fresh networks and optimizer states, empty env slots.

    Every process of a multi-host run calls this with the same arguments and gets the
    same global arrays. The env slots hold no game yet: the first rollout starts them
    (so starting a run compiles the game once, in the training program).

    Args:
        resolved: the run's configuration.
        key: see `_member_key_data`; default: each member's seed.
        env: default `HackMatrix()`.
        mesh: default `make_mesh(resolved.devices)`.
    """
    env = env if env is not None else HackMatrix()
    mesh = mesh if mesh is not None else make_mesh(resolved.devices)
    learner = Learner(env=env, config=resolved)
    shardings = train_state_shardings(abstract_train_state(resolved, env), mesh)
    # one small program: every process computes the same replicated values and zeros
    key_data = to_global(_member_key_data(resolved, key), shardings.key)
    return jax.jit(lambda data: _build(learner, data), out_shardings=shardings)(key_data)


def reshard_for(train_state: TrainState, resolved: ResolvedConfig, key=None, *,
                env: Environment | None = None, mesh: Mesh | None = None) -> TrainState:
    """Continue with a different batch layout (num_envs, device or host count).

    Keeps the parameters and the update and env-step counters; re-initialises the
    optimizer state (its moments were tuned to the old batch) and starts fresh games;
    draws new run keys from `key` (default: each member's seed folded with the update
    count, so a resumed run does not repeat its earlier randomness).
    """
    env = env if env is not None else HackMatrix()
    mesh = mesh if mesh is not None else make_mesh(resolved.devices)
    host = to_host((train_state.params, train_state.update, train_state.env_steps))
    params, update, env_steps = host
    if key is None:
        key = np.stack([np.asarray(jax.random.key_data(jax.random.fold_in(
            jax.random.key(m.seed, impl="threefry2x32"), int(update))))
            for m in config_lib.members(resolved)])
    fresh = init(resolved, key, env=env, mesh=mesh)
    shardings = train_state_shardings(fresh, mesh)
    params = to_global(params, shardings.params)
    learner = Learner(env=env, config=resolved)
    opt_state = jax.jit(jax.vmap(learner.optimizer_structure.init),
                        out_shardings=shardings.opt_state)(params)
    return TrainState(params=params, opt_state=opt_state, envs=fresh.envs, key=fresh.key,
                      update=to_global(update, shardings.update),
                      env_steps=to_global(env_steps, shardings.env_steps))


def place_hyper(resolved: ResolvedConfig, mesh: Mesh | None = None) -> Hyper:
    """The members' hyper-parameters (`make_hyper`) as global arrays on the mesh."""
    mesh = mesh if mesh is not None else make_mesh(resolved.devices)
    return to_global(make_hyper(resolved), hyper_shardings(resolved, mesh))


def make_train_fn(resolved: ResolvedConfig, env: Environment | None = None, mesh: Mesh | None = None,
                  teacher_policy=None, program_count=None):
    """The fused training program: `train_chunk(train_state, hyper=None) -> (train_state, metrics)`.

    `resolved` is any resolved config; `resolve(TrainConfig(), ...)` is the project's
    default, the same that `bin/train` runs. The training features it asks for
    (`hm.train.features.build`) are checked against `env` here: one the env cannot serve
    raises `ConfigError` naming its flag. `teacher_policy(states, mask, keys)` replaces
    the greedy teacher and `program_count(game_state)` the game's count of programs owned
    (tests train probe environments with them).

    One call runs `resolved.updates_per_call` PPO updates of every member on every device
    of `mesh`. `hyper` is the members' hyper-parameters (default: the config's,
    `place_hyper(resolved, mesh)`): traced values, so other values reuse the compiled
    program. The input TrainState is donated: use only
    the returned one afterwards. It compiles on the first call and never again for the
    same shapes and shardings.

    Metrics (replicated, one value per member: shape [P]): `loss/{total,policy,value,entropy}`,
    `ppo/{approx_kl,clip_frac,explained_variance,grad_norm,lr}` averaged over every
    minibatch step of the call; with PopArt (`--value-norm`), `value/{shift,scale}` the
    value statistics, averaged over the call's updates; with a teacher, `loss/teacher`
    (its cross-entropy on the labelled samples), `teacher/agreement` (the share of them
    where the policy's likeliest action is the teacher's) and `teacher/coef` (its
    annealed weight); `episode/{return,length,highest_stage,win_rate}` means
    over the episodes that finished during the call (`episode/count` of them; 0 when
    none did), `episode/max_stage` the highest stage any of them reached;
    `reward/<term>` each reward term's mean per env step; `actions/...` fractions of env
    steps (see the env's `action_metrics`), `legal/...` the same of the legal actions;
    and the scalar `env_steps`, each member's env steps of this call.
    """
    env = env if env is not None else HackMatrix()
    mesh = mesh if mesh is not None else make_mesh(resolved.devices)
    if mesh.devices.size != resolved.devices:
        raise ValueError(f"the mesh has {mesh.devices.size} devices but the config was resolved "
                         f"for {resolved.devices}")
    active = features.build(env, resolved, DATA_AXIS, teacher_policy, program_count)  # what the env cannot serve fails here
    learner = Learner(env=env, config=resolved, axis_name=DATA_AXIS, features=active)
    template = abstract_train_state(resolved, env)
    specs = _specs(template)
    hyper_specs = jax.tree.map(lambda _: PartitionSpec(), make_hyper(resolved))
    # check_vma=False: the env's own scans need not be written for shard_map's
    # replication typing; the learner averages gradients explicitly (see ppo.loss).
    chunk = jax.shard_map(learner.chunk, mesh=mesh, in_specs=(specs, hyper_specs),
                          out_specs=(specs, PartitionSpec()), check_vma=False)
    # Explicit shardings, the same as `init` gives: the output feeds the next call
    # unchanged, so the program never recompiles.
    shardings = train_state_shardings(template, mesh)
    program = jax.jit(chunk, donate_argnums=0, in_shardings=(shardings, hyper_shardings(resolved, mesh)),
                      out_shardings=(shardings, NamedSharding(mesh, PartitionSpec())))
    configured = place_hyper(resolved, mesh)

    @functools.wraps(program)  # keeps the program's name, which JAX's compile log uses
    def train_chunk(train_state: TrainState, hyper: Hyper | None = None):
        return program(train_state, configured if hyper is None else hyper)

    return train_chunk
