"""``scalebench plan``: the best way to train a model on a cluster, searched, explained and checkable.

request (sim.planner.request) -> space of layouts and synchronisations (space) -> each candidate
simulated on the fast path with what candidates share computed once (evaluate) -> ranked by the
objective, with the rules that removed the others counted (search) -> why the winner wins
(explain) -> the best re-simulated in detailed mode (verify). Pure: nothing is written here.
"""

from sim.planner.request import OBJECTIVES, PlanRequest, plan_request_from_dict
from sim.planner.search import Candidate, NoPlan, PlanResult, plan_search

__all__ = ["OBJECTIVES", "Candidate", "NoPlan", "PlanRequest", "PlanResult", "plan_request_from_dict", "plan_search"]
