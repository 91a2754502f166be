"""What a grid will cost before it runs (per stage and cell, the wall-clock on N workers, the disk): the experiment
layer asks, each part answers from its own cost model (:meth:`pgra.stages.Stage.plan`, :meth:`pgra.methods.Method.
price`, ``planned_disk``, ``models``) over its share of the bench fits (:mod:`.fits`)."""

from ...runtime.sizes import format_bytes, format_seconds
from .disk import DiskPlan, plan_disk
from .fits import BenchFits, gpu_measurements
from .inputs import (
                     default_workers,
                     gpu_requests,
                     plan_device,
                     planned_test_inputs,
                     stage_plans,
                     task_inputs,
                     task_splits,
                     worker_threads,
)
from .plan import plan_costs, plan_order
from .records import estimate_cell, estimate_stage, record_sources
from .schedule import Estimate, Plan, lpt_assign, lpt_order, plan_wallclock

__all__ = ["BenchFits", "DiskPlan", "Estimate", "Plan", "default_workers", "estimate_cell", "estimate_stage",
           "format_bytes", "format_seconds", "gpu_measurements", "gpu_requests", "lpt_assign", "lpt_order",
           "plan_costs", "plan_device", "plan_disk", "plan_order", "plan_wallclock", "planned_test_inputs",
           "record_sources", "stage_plans", "task_inputs", "task_splits", "worker_threads"]
