"""Task definitions (TaskSpec), the registry of built-in and custom tasks, and data loaders."""

from .loaders import (
    Example,
    TaskData,
    carve_dev,
    check_label_ids,
    check_label_words,
    load_task,
    read_split,
    task_content,
    task_paths,
)
from .registry import BUILTIN, get_task, list_tasks, task_from_manifest, task_from_yaml, task_names
from .spec import READER_FORMATS, DataSpec, TaskSpec

__all__ = ["BUILTIN", "READER_FORMATS", "DataSpec", "Example", "TaskData", "TaskSpec", "carve_dev",
           "check_label_ids", "check_label_words", "get_task", "list_tasks", "load_task", "read_split", "task_from_manifest",
           "task_content", "task_from_yaml", "task_names", "task_paths"]
