"""The automatic backend choice as a model and a controller: a `Policy` of thresholds, the trial's `Phase`, and a
pure `decide(observations, policy) -> Verdict` over `predict`'s rates (docs/automatic_choice.md)."""

from ._model import Action, Measured, Observations, Rates, Stretch, Verdict, busy_while_working, busy_with_one_gil, decide, grown_busy, predict
from ._phase import Phase
from ._policy import DEFAULT_POLICY, EarlyStart, Policy, Remembering, WinnerWatch, current_policy, first_threads, using_policy

__all__ = ["DEFAULT_POLICY", "Action", "EarlyStart", "Measured", "Observations", "Phase", "Policy", "Rates", "Remembering", "Stretch",
           "Verdict", "WinnerWatch", "busy_while_working", "busy_with_one_gil", "current_policy", "decide", "first_threads",
           "grown_busy", "predict", "using_policy"]
