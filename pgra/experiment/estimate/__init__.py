"""What a grid will cost before it runs: per stage and cell, the wall-clock on N workers, and the disk.

The experiment layer asks, each part answers: a stage prices itself (:meth:`pgra.stages.Stage.price`,
:meth:`~pgra.stages.Stage.planned_line`), a method its cell (:meth:`pgra.methods.Method.price`,
:meth:`~pgra.methods.Method.planned_disk`), each from its own share of the bench fits (:mod:`pgra.reader.fits`,
:mod:`pgra.rerank.cost_model`, :mod:`pgra.retrieval.cost_model`). Here: the fits put together (:mod:`.fits`), what a
plan counts (:mod:`.inputs`: the device, workers, inputs), estimates from cost records before the fits
(:mod:`.records`), the schedule (:mod:`.schedule`), the disk (:mod:`.disk`) and the plan (:mod:`.plan`).
"""

from ...sizes import format_bytes, format_seconds
from .disk import DiskPlan, plan_disk
from .fits import BenchFits, gpu_measurements
from .inputs import (
                     default_workers,
                     gpu_requests,
                     plan_device,
                     planned_test_inputs,
                     stage_embeddings,
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
           "record_sources", "stage_embeddings", "task_inputs", "task_splits", "worker_threads"]
