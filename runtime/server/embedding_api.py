"""Upstream's embedding routes, `/v1/embeddings` (OpenAI's) and `/encode` (native), on this
server: refused with the reason as a 400 in the OpenAI error shape, where an unknown route would
be a 404 that reads as a wrong URL. Upstream answers them only for a model launched with
`--is-embedding`; every architecture this runtime serves is generative, so it has no such flag.
"""

from __future__ import annotations

from fastapi import APIRouter

from sglang.runtime.server.errors import ApiError

router = APIRouter()

REASON = (
    "this server serves a generative model, which returns no embeddings (upstream serves them only for "
    "an embedding model launched with --is-embedding, which this runtime does not serve)"
)


@router.post("/v1/embeddings")
@router.post("/encode")
async def embeddings() -> None:
    raise ApiError(400, REASON, "model")
