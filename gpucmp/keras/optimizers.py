"""Optimizers: Adam, SGD (momentum, Nesterov) and RMSprop with Keras' defaults and formulas.

The update itself runs in C inside ``Plan.train_step``; an optimizer here holds the
hyper-parameters, the ``iterations`` counter (t = iterations + 1 in Adam's bias
correction) and its state: per weight Variable, the slot buffers (Adam m and v; SGD
with momentum m; RMSprop v), zero-filled on the device when first needed (at compile).

Sharing: slots are kept per variable, so one optimizer object given to two models
(e.g. a GAN's discriminator and combined model, as tf.keras 2 code often does) keeps
separate, correct state for each variable and one shared ``iterations`` counter, which
is tf.keras 2's behaviour. (Keras 3 raises in that case instead.)

Legacy arguments accepted: ``lr`` (for ``learning_rate``) and ``decay``
(tf.keras 2 time-based decay: lr / (1 + decay * iterations)).
"""
import math
import numbers

from . import backend


def _non_negative(value, arg, cls_name, upper=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or value < 0 or (upper is not None and value >= upper):
        bound = f"in [0, {upper})" if upper is not None else ">= 0"
        raise ValueError(f"{cls_name}: `{arg}` must be a finite number {bound}, received {arg}={value!r}")
    return float(value)


class Optimizer:
    kind = None            # the plan's optimizer name
    loss_scaling = False   # LossScaleOptimizer: dynamic loss scaling in the plan
    default_name = "optimizer"
    _defaults = {}

    def __init__(self, learning_rate=0.001, name=None, weight_decay=None, clipnorm=None,
                 clipvalue=None, global_clipnorm=None, use_ema=False, ema_momentum=0.99,
                 ema_overwrite_frequency=None, loss_scale_factor=None,
                 gradient_accumulation_steps=None, lr=None, decay=0.0, **kwargs):
        cls_name = type(self).__name__
        if kwargs:
            raise ValueError(f"{cls_name}: unrecognized arguments {sorted(kwargs)}")
        if lr is not None:
            learning_rate = lr
        for arg, value in (("weight_decay", weight_decay), ("clipnorm", clipnorm),
                           ("clipvalue", clipvalue), ("global_clipnorm", global_clipnorm),
                           ("loss_scale_factor", loss_scale_factor),
                           ("gradient_accumulation_steps", gradient_accumulation_steps)):
            if value is not None:
                raise NotImplementedError(f"{cls_name}: `{arg}` is not supported yet")
        if use_ema:
            raise NotImplementedError(f"{cls_name}: use_ema is not supported yet")
        self.name = name or self.default_name
        self.learning_rate = learning_rate
        self.decay = _non_negative(decay, "decay", cls_name)
        self.iterations = 0
        self.built = False            # True after the first update, as in Keras
        self._slots = {}              # id(variable) -> (variable, [Buffer, ...])

    # ------------------------------------------------------------ learning rate
    @property
    def learning_rate(self):
        return self._learning_rate if not callable(self._learning_rate) \
            else float(self._learning_rate(self.iterations))

    @learning_rate.setter
    def learning_rate(self, value):
        if callable(value):          # a schedule: called with the iteration count
            self._learning_rate = value
            return
        self._learning_rate = _non_negative(value, "learning_rate", type(self).__name__)

    lr = learning_rate

    def current_learning_rate(self):
        lr = self.learning_rate
        if self.decay:
            lr = lr / (1.0 + self.decay * self.iterations)
        return lr

    # ------------------------------------------------------------ state
    def slots_per_variable(self):
        raise NotImplementedError

    def state_for(self, variables):
        """The slot buffers for ``variables`` in the plan's order (created zero-filled when new)."""
        core = backend.core()
        out = []
        k = self.slots_per_variable()
        for var in variables:
            entry = self._slots.get(id(var))
            if entry is None or entry[0] is not var:
                bufs = [core.Buffer(var.buffer.backend, var.buffer.size) for _ in range(k)]
                entry = (var, bufs)
                self._slots[id(var)] = entry
            out.extend(entry[1])
        return out

    @property
    def variables(self):
        """Keras counts iterations and learning_rate plus the slots."""
        return [buf for _, bufs in self._slots.values() for buf in bufs]

    def count_params(self):
        return sum(b.size for b in self.variables) + 2

    def hparams(self):
        """The dict ``Plan.train_step`` takes (t = iterations + 1)."""
        hp = {"lr": self.current_learning_rate(), "t": self.iterations + 1}
        hp.update(self._extra_hparams())
        return hp

    def _extra_hparams(self):
        return {}

    # ------------------------------------------------------------ config
    def get_config(self):
        lr = self._learning_rate
        config = {"name": self.name, "learning_rate": lr if not callable(lr) else None}
        if self.decay:
            config["decay"] = self.decay
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        return f"<{type(self).__name__} {self.get_config()}>"


class Adam(Optimizer):
    kind = "adam"
    default_name = "adam"

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, name=None, **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if amsgrad:
            raise NotImplementedError("Adam: amsgrad=True is not supported yet")
        self.beta_1 = _non_negative(beta_1, "beta_1", "Adam", upper=1)
        self.beta_2 = _non_negative(beta_2, "beta_2", "Adam", upper=1)
        self.epsilon = _non_negative(epsilon if epsilon is not None else 1e-7, "epsilon", "Adam")
        self.amsgrad = False

    def slots_per_variable(self):
        return 2

    def _extra_hparams(self):
        return {"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}

    def get_config(self):
        config = super().get_config()
        config.update(beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon, amsgrad=False)
        return config


class SGD(Optimizer):
    kind = "sgd"
    default_name = "SGD"

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name=None, **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum = _non_negative(momentum, "momentum", "SGD", upper=1.0 + 1e-12)
        self.nesterov = bool(nesterov)

    def slots_per_variable(self):
        return 1 if self.momentum > 0 else 0

    def _extra_hparams(self):
        return {"momentum": self.momentum, "nesterov": self.nesterov}

    def get_config(self):
        config = super().get_config()
        config.update(momentum=self.momentum, nesterov=self.nesterov)
        return config


class RMSprop(Optimizer):
    kind = "rmsprop"
    default_name = "rmsprop"

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False,
                 name=None, **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if momentum:
            raise NotImplementedError("RMSprop: momentum > 0 is not supported yet")
        if centered:
            raise NotImplementedError("RMSprop: centered=True is not supported yet")
        self.rho = _non_negative(rho, "rho", "RMSprop", upper=1)
        self.epsilon = _non_negative(epsilon if epsilon is not None else 1e-7, "epsilon", "RMSprop")
        self.momentum = 0.0
        self.centered = False

    def slots_per_variable(self):
        return 1

    def _extra_hparams(self):
        return {"rho": self.rho, "epsilon": self.epsilon}

    def get_config(self):
        config = super().get_config()
        config.update(rho=self.rho, epsilon=self.epsilon, momentum=0.0, centered=False)
        return config


class LossScaleOptimizer(Optimizer):
    """Keras' dynamic loss scaling around another optimizer (what ``compile()`` wraps the
    optimizer in under the 'mixed_float16' policy, as Keras 3 does).

    The loss is multiplied by ``dynamic_scale`` before the backward pass and the weight
    gradients are divided by it. A step whose gradients hold an inf or NaN is skipped
    (weights, slots and ``iterations`` unchanged) and halves the scale; after
    ``dynamic_growth_steps`` good steps in a row the scale doubles. The plan does all of
    it on the device, inside the captured step; ``dynamic_scale`` and ``step_counter``
    are brought back after each call. ``iterations`` is the inner optimizer's (applied
    steps only). One approximation: with a learning-rate schedule, fit() evaluates the
    schedule per step index of a chunk of steps; a skipped step inside a chunk shifts the
    following steps' rates by one step until the chunk ends."""

    def __init__(self, inner_optimizer, initial_scale=2.0 ** 15, dynamic_growth_steps=2000, name=None,
                 **kwargs):
        if not isinstance(inner_optimizer, Optimizer) or isinstance(inner_optimizer, LossScaleOptimizer):
            raise ValueError("LossScaleOptimizer: `inner_optimizer` must be an Adam, SGD or RMSprop "
                             f"instance, received {inner_optimizer!r}")
        if kwargs:
            raise ValueError(f"LossScaleOptimizer: unrecognized arguments {sorted(kwargs)}")
        scale = _non_negative(initial_scale, "initial_scale", "LossScaleOptimizer")
        if not scale > 0:
            raise ValueError(f"LossScaleOptimizer: `initial_scale` must be > 0, received {initial_scale!r}")
        if isinstance(dynamic_growth_steps, bool) or not isinstance(dynamic_growth_steps, numbers.Integral) \
                or not 1 <= dynamic_growth_steps < 2 ** 31:
            raise ValueError("LossScaleOptimizer: `dynamic_growth_steps` must be a positive int, "
                             f"received {dynamic_growth_steps!r}")
        self.inner_optimizer = inner_optimizer
        self.name = name or "loss_scale_optimizer"
        self.initial_scale = scale
        self.dynamic_growth_steps = int(dynamic_growth_steps)
        self.dynamic_scale = scale
        self.step_counter = 0
        self.decay = 0.0

    kind = property(lambda self: self.inner_optimizer.kind)
    loss_scaling = True

    @property
    def iterations(self):
        return self.inner_optimizer.iterations

    @iterations.setter
    def iterations(self, value):
        self.inner_optimizer.iterations = value

    @property
    def built(self):
        return self.inner_optimizer.built

    @built.setter
    def built(self, value):
        self.inner_optimizer.built = value

    @property
    def learning_rate(self):
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        self.inner_optimizer.learning_rate = value

    lr = learning_rate

    def current_learning_rate(self):
        return self.inner_optimizer.current_learning_rate()

    def slots_per_variable(self):
        return self.inner_optimizer.slots_per_variable()

    def state_for(self, variables):
        return self.inner_optimizer.state_for(variables)

    @property
    def variables(self):
        return self.inner_optimizer.variables

    def count_params(self):
        return self.inner_optimizer.count_params() + 2   # Keras: + dynamic_scale, step_counter

    def hparams(self):
        hp = self.inner_optimizer.hparams()
        hp.update(self.scale_hparams())
        return hp

    def scale_hparams(self):
        return {"loss_scale": self.dynamic_scale, "loss_scale_good": float(self.step_counter)}

    def record_scale(self, stats):
        """The scale state the plan brought back after a call."""
        self.dynamic_scale = float(stats["loss_scale"])
        self.step_counter = int(stats["loss_scale_good"])

    def scale_loss(self, loss):
        return loss * self.dynamic_scale

    def get_config(self):
        return {"name": self.name, "inner_optimizer": serialize(self.inner_optimizer),
                "initial_scale": self.initial_scale, "dynamic_growth_steps": self.dynamic_growth_steps}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        inner = deserialize(config.pop("inner_optimizer"))
        return cls(inner, **config)

    def __repr__(self):
        return f"<LossScaleOptimizer {self.inner_optimizer!r} scale={self.dynamic_scale}>"


_BY_NAME = {"adam": Adam, "sgd": SGD, "rmsprop": RMSprop}
_KNOWN_ELSEWHERE = ("adagrad", "adadelta", "adamax", "nadam", "adamw", "ftrl", "lion", "adafactor",
                    "lamb")


def get(identifier):
    """An optimizer from a name ('adam', 'sgd', 'rmsprop'; any case), an instance or a class."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, type) and issubclass(identifier, Optimizer):
        return identifier()
    if isinstance(identifier, str):
        key = identifier.strip().lower()
        if key in _BY_NAME:
            return _BY_NAME[key]()
        if key in _KNOWN_ELSEWHERE:
            raise NotImplementedError(f"optimizer={identifier!r} is not implemented by gpucmp yet; "
                                      "supported: adam, sgd, rmsprop")
        raise ValueError(f"Unknown optimizer: {identifier!r}. Supported: adam, sgd, rmsprop")
    if isinstance(identifier, dict) and "class_name" in identifier:
        return deserialize(identifier)
    raise ValueError(f"Could not interpret optimizer: {identifier!r}")


def serialize(optimizer):
    return {"class_name": type(optimizer).__name__, "config": optimizer.get_config()}


def deserialize(config):
    classes = {c.__name__: c for c in _BY_NAME.values()}
    classes["LossScaleOptimizer"] = LossScaleOptimizer
    cls = classes.get(config.get("class_name"))
    if cls is None:
        raise ValueError(f"Unknown optimizer in config: {config!r}")
    return cls.from_config(dict(config.get("config", {})))


class _Legacy:
    """``keras.optimizers.legacy.Adam`` etc. (tf.keras 2.11+ spelling) -> the same classes."""
    Adam, SGD, RMSprop, Optimizer = Adam, SGD, RMSprop, Optimizer


legacy = _Legacy()
