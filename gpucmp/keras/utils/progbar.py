"""Progbar: Keras 3's progress bar, text for text.

    469/469 ━━━━━━━━━━━━━━━━━━━━ 2s 3ms/step - accuracy: 0.9000 - loss: 0.3000

A 20-character bar; while running, the ETA; when finished, the elapsed seconds; the
time per step in us/ms/s; each value with ``.4f`` (``.4e`` when |v| <= 1e-3).
verbose=1 redraws one line with ``\\r`` at most every ``interval`` seconds (printing
is slow; a training step of a small model is not), verbose=2 prints one line when
finished. Keras' ANSI styling (bold counts, a green done part and a grey rest of the
bar) is kept, as Keras writes it on every POSIX system: without it the two parts of the
bar would look alike. ``ansi=False`` gives plain text.
"""
import math
import sys
import time


def format_value(value):
    return f"{value:.4f}" if abs(value) > 1e-3 else f"{value:.4e}"


def format_time(time_per_unit, unit_name="step"):
    if time_per_unit >= 1 or time_per_unit == 0:
        return f" {time_per_unit:.0f}s/{unit_name}"
    if time_per_unit >= 1e-3:
        return f" {time_per_unit * 1e3:.0f}ms/{unit_name}"
    return f" {time_per_unit * 1e6:.0f}us/{unit_name}"


class Progbar:
    """``Progbar(target, width=20, verbose=1, interval=0.05, stateful_metrics=None,
    unit_name='step')``; ``update(current, values=None, finalize=None)``, ``add(n, values)``.

    Values named in ``stateful_metrics`` are shown as given; others are averaged over
    the steps (Keras' rule). Pass ``stateful_metrics=None`` with ``all_stateful=True``
    to show every value as given (what fit's logger does: its values are running means).
    """

    def __init__(self, target, width=20, verbose=1, interval=0.05, stateful_metrics=None,
                 unit_name="step", stream=None, all_stateful=False, ansi=True):
        self.target = target
        self.width = width
        self.verbose = verbose
        self.interval = interval
        self.unit_name = unit_name
        self.stateful_metrics = set(stateful_metrics or ())
        self.all_stateful = all_stateful
        self.stream = stream if stream is not None else sys.stdout
        self._ansi = ansi
        self._values = {}
        self._values_order = []
        self._seen_so_far = 0
        self._start = time.time()
        self._last_update = 0.0
        self._time_after_first_step = None
        self._prev_total_width = 0

    def _style(self, text, code):
        return f"\x1b[{code}m{text}\x1b[0m" if self._ansi else text

    def update(self, current, values=None, finalize=None):
        if finalize is None:
            finalize = self.target is not None and current >= self.target
        for k, v in values or ():
            if k not in self._values_order:
                self._values_order.append(k)
            if self.all_stateful or k in self.stateful_metrics:
                self._values[k] = [v, 1]
            elif finalize:
                self._values[k] = [v, 1]
            else:
                base = max(current - self._seen_so_far, 1)
                total, count = self._values.get(k, [0.0, 0])
                self._values[k] = [total + v * base, count + base]
        self._seen_so_far = current
        now = time.time()
        time_per_unit = self._estimate_step_duration(current, now)

        if self.verbose == 1:
            if now - self._last_update < self.interval and not finalize:
                return
            self._last_update = now
            if self.target is not None and self.target > 0:
                digits = int(math.log10(self.target)) + 1
                count = f"%{digits}d/%d" % (current, self.target)
                filled = int(self.width * float(current) / self.target)
                bar = self._style(count, "1") + " "
                if filled > 0:
                    bar += self._style("━" * filled, "32")
                bar += self._style("━" * (self.width - filled), "37")
                plain = len(count) + 1 + self.width
            else:
                bar = "%7d/Unknown" % current
                plain = len(bar)
            if self.target is not None and self.target > 0 and not finalize:
                eta = time_per_unit * (self.target - current)
                if eta > 3600:
                    eta_text = "%d:%02d:%02d" % (eta // 3600, (eta % 3600) // 60, eta % 60)
                elif eta > 60:
                    eta_text = "%d:%02d" % (eta // 60, eta % 60)
                else:
                    eta_text = "%ds" % eta
            else:
                eta_text = f"{now - self._start:.0f}s"
            info_plain = f" {eta_text}" + format_time(time_per_unit, self.unit_name) + self._metrics_text()
            info = " " + self._style(eta_text, "1") + info_plain[len(eta_text) + 1:]
            total_width = plain + len(info_plain)
            message = "\r" + bar + info
            if self._prev_total_width > total_width:
                message += " " * (self._prev_total_width - total_width)
            if finalize:
                message += "\n"
            self._prev_total_width = total_width
            self.stream.write(message)
            self.stream.flush()
        elif self.verbose == 2 and finalize and self.target is not None and self.target > 0:
            digits = int(math.log10(self.target)) + 1
            count = f"%{digits}d/%d" % (current, self.target)
            info = f"{count} - {now - self._start:.0f}s -" + format_time(time_per_unit, self.unit_name)
            for k in self._values_order:
                total, n = self._values[k]
                avg = total / max(1, n)
                info += f" - {k}: " + (f"{avg:.4f}" if avg > 1e-3 else f"{avg:.4e}")
            self.stream.write(info + "\n")
            self.stream.flush()
            self._last_update = now

    def _metrics_text(self):
        text = ""
        for k in self._values_order:
            total, n = self._values[k]
            text += f" - {k}: " + format_value(total / max(1, n))
        return text

    def add(self, n, values=None):
        self.update(self._seen_so_far + n, values)

    def _estimate_step_duration(self, current, now):
        if not current:
            return 0
        if self._time_after_first_step is not None and current > 1:
            per = (now - self._time_after_first_step) / (current - 1)
        else:
            per = (now - self._start) / current
        if current == 1:
            self._time_after_first_step = now
        return per
