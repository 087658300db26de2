"""One sample, one character at a time, with the probability of every token the sampler drew.

Design choices:
- Prompt ids, seeding and `Sampler.probs` are `generate.py`'s: a seed gives its text, a probability the one drawn with.
- One event per character: released together, each takes the tokens that spell it (their probabilities multiplied).
- `Continuation` is blocking and not thread-safe: one worker thread at a time, the run's lock held per forward only."""

from __future__ import annotations

import math
import warnings
from collections import deque
from dataclasses import dataclass

import torch
from torch import Tensor

from inference.generation import prompt_ids, token_grammar
from model.sampling import Sampler
from model.streaming import stream
from playground.runs import CachedRun
from playground.schemas import GenerateRequest
from playground.stages import is_syllable_id, syllable_stages

TOP_ALTERNATIVES = 5


class SamplingError(RuntimeError):
    """The model gave something no character can be drawn from (NaN or infinite logits: broken weights)."""


@dataclass
class TokenRecord:
    id: int
    prob: float
    top: list[dict]  # the most likely other tokens: [{"text", "prob"}], best first
    stages: list[dict] | None = None  # a hangul syllable's three stage probabilities; None otherwise


class Continuation:
    def __init__(self, cached: CachedRun, params: GenerateRequest):
        self.cached, self.params = cached, params
        run = cached.run
        self.tokenizer = run.tokenizer
        with warnings.catch_warnings(record=True):  # the unknown characters are reported in the summary
            warnings.simplefilter("always")
            ids = prompt_ids(self.tokenizer, params.prompt)
        self.unknown = sorted(self.tokenizer.unknown_chars(params.prompt))
        self.prompt_tokens = len(ids)
        # What the model really read: the prompt, or the line break an empty prompt starts from.
        self.context = params.prompt if len(self.tokenizer.encode(params.prompt)) else self.tokenizer.decode(ids)
        device = next(run.model.parameters()).device
        self._sampler = Sampler(run.model.config.vocab_size, device)  # the probabilities of each token drawn
        self._sampler.set(params.temperature, params.top_k, params.top_p, None)
        generator = torch.Generator(device=device).manual_seed(params.seed)
        idx = torch.tensor([ids], dtype=torch.long, device=device)
        # Jamo spelling rules: the text re-encodes to the tokens sampled, so `pos` holds for attention requests.
        self._steps = stream(
            run.model,
            idx,
            params.max_new_tokens,
            params.temperature,
            params.top_k,
            params.top_p,
            True,
            generator,
            grammar=token_grammar(self.tokenizer),
        )
        self._decoder = self.tokenizer.stream_decoder()
        self._stages = getattr(self.tokenizer, "kind", None) == "hangul"  # ids 1..11172 are the syllables
        self._pending: list[TokenRecord] = []
        self._ready: deque[dict] = deque()  # events of characters released together, not yet returned
        self.generated = 0  # tokens sampled so far
        self.events: list[dict] = []
        self.finished = False

    def _record(self, token_id: int, logits: Tensor) -> TokenRecord:
        probs = self._sampler.probs(logits[None])[0]
        if not bool(torch.isfinite(probs).all()):
            raise SamplingError(
                f"run {self.cached.name!r} gave probabilities that are not finite numbers "
                "(NaN or infinity): its weights are broken; train it again"
            )
        probs_top, ids_top = torch.topk(probs, min(TOP_ALTERNATIVES + 1, probs.numel()))
        top = [
            {"text": self.tokenizer.decode([i]), "prob": round(float(q), 6)}
            for q, i in zip(probs_top.tolist(), ids_top.tolist(), strict=True)
            if i != token_id and q > 0
        ]
        stages = syllable_stages(probs, token_id) if self._stages and is_syllable_id(token_id) else None
        return TokenRecord(token_id, float(probs[token_id]), top[:TOP_ALTERNATIVES], stages)

    def _event(self, text: str, tokens: list[TokenRecord], pos: int) -> dict:
        event = {
            "text": text,
            "prob": round(math.prod(t.prob for t in tokens), 6),
            "top": tokens[0].top,
            "pos": pos,
            "n_tokens": len(tokens),
        }
        if len(tokens) == 1 and tokens[0].stages is not None:
            event["stages"] = tokens[0].stages
        self.events.append(event)
        return event

    def _release(self, piece: str) -> dict:
        """Events for `piece` from the pending tokens (the newest may stay for the next); the first, the rest queued."""
        ids = [t.id for t in self._pending]
        keep = 0
        if len(ids) > 1 and self.tokenizer.decode(ids) != piece and self.tokenizer.decode(ids[:-1]) == piece:
            keep = 1  # a jamo initial that closed the previous syllable starts the next one
        tokens = self._pending[: len(ids) - keep]
        self._pending = self._pending[len(ids) - keep :]
        pos = self.prompt_tokens + self.generated - len(ids)  # index of the event's first token in the sequence
        start = 0
        for i, ch in enumerate(piece):
            end = next(
                (
                    k
                    for k in range(start + 1, len(tokens))
                    if i < len(piece) - 1 and self.tokenizer.decode([t.id for t in tokens[start:k]]) == ch
                ),
                None,
            )
            if end is None:  # the last character, or one no run of tokens spells alone: the rest together
                self._ready.append(self._event(piece[i:], tokens[start:], pos + start))
                break
            self._ready.append(self._event(ch, tokens[start:end], pos + start))
            start = end
        return self._ready.popleft()

    def next_event(self) -> dict | None:
        """Sample until the decoder releases text; its next character's event, or None once the sample is done."""
        if self._ready:
            return self._ready.popleft()
        while not self.finished:
            with self.cached.lock, torch.inference_mode():
                step = next(self._steps, None)
            if step is None:
                self.finished = True
                tail = self._decoder.flush()
                if tail and self._pending:
                    return self._release(tail)
                return None
            nxt, logits = step
            token_id = int(nxt[0, 0])
            self._pending.append(self._record(token_id, logits[0]))
            self.generated += 1
            piece = self._decoder.feed(token_id)
            if piece:
                return self._release(piece)
        return None

    def summary(self) -> dict:
        completion = "".join(e["text"] for e in self.events)
        return {
            "run": self.cached.name,
            "weights": self.cached.run.weights.kind,
            "checkpoint": self.cached.run.path.name,  # best.pt or ckpt.pt: playground/runs.py chose it
            "text": self.params.prompt + completion,
            "completion": completion,
            "context": self.context,
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.generated,
            "seed": self.params.seed,
            "unknown_chars": self.unknown,
        }

    def close(self) -> None:
        """Stop sampling (a client went away); the model is left as it was."""
        self._steps.close()
