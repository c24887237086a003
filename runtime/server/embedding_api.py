"""Upstream's routes for embedding, reranking and classification models, `/v1/embeddings`
(OpenAI's), `/encode`, `/v1/rerank` and `/classify`, on this server: refused with the reason as a
400 in the OpenAI error shape, where an unknown route would be a 404 that reads as a wrong URL.
Upstream answers them only for a model launched with `--is-embedding` (an embedding model, a
cross-encoder, a sequence classifier); every architecture this runtime serves is generative, so
it has no such flag. (`/v1/score` scores label tokens with the generative model itself.)
"""

from __future__ import annotations

from fastapi import APIRouter

from sglang.runtime.server.errors import ApiError

router = APIRouter()

REASON = (
    "this server serves a generative model, which returns no embeddings, rerank scores or class logits "
    "(upstream serves them only for a model launched with --is-embedding, which this runtime does not serve)"
)


@router.post("/v1/embeddings")
@router.post("/encode")
@router.api_route("/v1/rerank", methods=["POST", "PUT"])
@router.api_route("/classify", methods=["POST", "PUT"])
async def embeddings() -> None:
    raise ApiError(400, REASON, "model")
