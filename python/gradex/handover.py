"""What GradexState(optimizer=...) takes over from the optimizer it is given
(SGD's momentum and weight decay into the hook's momentum correction), what it
leaves (Adam, AdamW, unknown optimizers: error feedback only, warned), and the
one line that says so (docs/measurements.md, "Handing the optimizer over")."""
import torch


# What GradexState(optimizer=...) does for optimizers whose momentum it cannot
# move into the hook (Adam, AdamW, unknown ones; docs/measurements.md,
# "Handing the optimizer over"): dense steps before sparsifying.
_ADAPTIVE_START_ITER = 0


class _Handover:
    """What GradexState(optimizer=...) changed in the optimizer (close() gives
    it back) and what it decided, in one line (``note``)."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.momentum = 0.0        # moved into the hook's momentum correction
        self.decay = {}            # data_ptr -> weight decay the hook adds
        # (param group index, key, value before, value while handed over): by
        # index, since optimizer.load_state_dict() replaces the group dicts.
        self.changes = []
        self.start_iter = None     # a warm-up chosen for this optimizer (None: none)
        self.note = ""
        self.cost = False          # True: accuracy below dense is expected (warned)
        self.record = {"optimizer": type(optimizer).__name__}

    def apply(self):
        for i, key, _, new in self.changes:
            self.optimizer.param_groups[i][key] = new

    def restore(self):
        for i, key, old, _ in self.changes:
            self.optimizer.param_groups[i][key] = old
        self.changes = []


def plan_handover(optimizer):
    """Decides, without changing anything yet, what GradexState takes over."""
    h = _Handover(optimizer)
    name = type(optimizer).__name__
    groups = optimizer.param_groups
    why_not = ""
    if isinstance(optimizer, torch.optim.SGD):
        momenta = sorted({float(g["momentum"]) for g in groups})
        if len(momenta) > 1:
            why_not = f"its parameter groups have momenta {momenta}; the hook keeps one"
        elif any(g.get("dampening", 0) for g in groups):
            why_not = "dampening != 0"
        elif any(g.get("maximize", False) for g in groups):
            why_not = "maximize=True"
        elif momenta and momenta[0] >= 1:
            why_not = f"momentum {momenta[0]} >= 1"
        if not why_not and momenta and momenta[0] > 0:
            m = momenta[0]
            h.momentum = m
            nesterov = any(g.get("nesterov", False) for g in groups)
            decays = sorted({float(g["weight_decay"]) for g in groups if g["weight_decay"]})
            for i, g in enumerate(groups):
                h.changes.append((i, "momentum", g["momentum"], 0))
                # torch's SGD adds weight_decay * w before its momentum: the
                # hook adds it before the velocity, so the decay keeps its
                # momentum as in dense SGD (left in the optimizer it would act
                # about 1/(1-m) times weaker).
                if g["weight_decay"]:
                    for p in g["params"]:
                        h.decay[p.data_ptr()] = float(g["weight_decay"])
                    h.changes.append((i, "weight_decay", g["weight_decay"], 0))
            h.record.update(momentum=m, nesterov=nesterov, weight_decay=decays)
            h.note = (f"SGD momentum {m:g} moved into the hook (momentum_correction={m:g}, "
                      "the optimizer's momentum 0 until close())"
                      + (f", weight decay {', '.join(f'{d:g}' for d in decays)} with it"
                         if decays else "")
                      + (", nesterov=True run as plain (heavy-ball) momentum correction"
                         if nesterov else "")
                      # Measured, not promised (docs/measurements.md).
                      + "; expect test accuracy up to ~1.5 points below dense early on, closing "
                      "with training (Fashion-MNIST, 3 models, density 0.01, 2 epochs, 3 seeds: "
                      "spardl a median 0.23 points below dense, PowerSGD 0.26; a small CNN at "
                      "batch 64: 2.3)")
            return h
        if not why_not:
            h.note = "SGD without momentum: error feedback only, the optimizer unchanged"
            return h
    h.start_iter = _ADAPTIVE_START_ITER or None
    h.cost = True
    what = (f"{name}'s momentum stays in the optimizer ({why_not})" if why_not
            else f"{name}: no momentum to move into the hook, the optimizer unchanged")
    # Measured, not promised: docs/measurements.md, "Handing the optimizer over".
    h.note = (what + ", error feedback only: expect accuracy below dense (Adam on the "
              "Fashion-MNIST MLP at density 0.01, 2 epochs: 1.7-4.3 points below dense Adam, "
              "still 0.7-3.4 at density 0.1; SGD with momentum, handed over, a median 0.23)")
    return h
