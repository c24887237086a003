"""The scheduler's side of upstream's weight routes: replacing the served weights between two
steps (`/update_weights_from_disk`, `update_weights_from_tensor`) and reading one back
(`/get_weights_by_name`).

Invariant: weights change only while no request runs or waits, and the prefix cache is emptied
after (unless the caller asks to keep it), so no output and no cached prefix mixes two sets of
weights. The tokenizer manager holds new requests and lets the running ones finish first.
"""

from __future__ import annotations

import logging

from sglang.runtime.loader.live_weights import WeightUpdateError, read_weight
from sglang.runtime.processes.control import (
    GetWeightsByName,
    UpdateWeightsFromDisk,
    UpdateWeightsFromTensor,
    WeightsRead,
    WeightsUpdated,
)
from sglang.runtime.scheduler.scheduler import Scheduler

logger = logging.getLogger(__name__)


def update_weights(scheduler: Scheduler, message: UpdateWeightsFromDisk | UpdateWeightsFromTensor) -> WeightsUpdated:
    if scheduler.waiting or scheduler.running:
        return WeightsUpdated(False, "requests are running or waiting: abort them or let them finish first")
    if scheduler.hicache is not None:
        return WeightsUpdated(False, "the hierarchical cache's lower tiers hold KV of these weights: restart instead")
    try:
        if isinstance(message, UpdateWeightsFromDisk):
            scheduler.runner.reload_weights(scheduler.args, message.model_path)
            source = message.model_path
        else:
            scheduler.runner.write_weights(message.named_tensors)
            source = f"{len(message.named_tensors)} tensors"
    except WeightUpdateError as e:
        logger.error("weights not updated: %s", e)
        return WeightsUpdated(False, str(e))
    if message.flush_cache:
        scheduler.flush_cache()
    logger.info("weights updated from %s", source)
    return WeightsUpdated(True, "Succeeded to update model weights.")


def get_weights(scheduler: Scheduler, message: GetWeightsByName) -> WeightsRead:
    try:
        return WeightsRead(read_weight(scheduler.runner.model, message.name, message.truncate_size))
    except KeyError:
        return WeightsRead(None, f"the model has no parameter {message.name!r}")
