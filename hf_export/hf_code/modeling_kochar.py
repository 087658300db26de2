"""kochar-gpt's AttentionLanguageModel for `transformers` (`trust_remote_code=True`), self-contained.

The parameter names are the project's own, so the weights load as trained. No KV cache: every step recomputes the
window, which gives the project's uncached logits exactly."""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_kochar import KocharConfig

ROPE_BASE = 10000.0
GATE_CHANNELS = 12  # a head gate reads this many channels of its block's input
# The kinds of each setting this code computes; any other is refused when the model is built, never computed.
KINDS = {
    "position": ("learned", "rope"),
    "norm": ("layernorm", "rmsnorm"),
    "mlp": ("gelu", "relu2", "swiglu"),
    "embedding": ("token", "jamo"),
    "head": ("softmax", "jamo"),
    "jamo_initials": ("pairs", "linear"),
}
# The hangul tokenizer's ids: 1..11172 are the syllables, id - 1 = (initial * 21 + medial) * 28 + final.
N_L, N_V, N_T, N_SYL = 19, 21, 28, 11172
N_PARTS = N_L + N_V + N_T


class JamoEmbedding(nn.Module):
    """A syllable's jamo vectors, summed (zero for other ids)."""

    def __init__(self, vocab_size, size):
        super().__init__()
        self.parts = nn.Embedding(N_PARTS + 1, size, padding_idx=N_PARTS)

    def forward(self, idx):
        # computed from the ids (no buffer: transformers may build the model on the meta device)
        s = idx - 1
        rows = torch.stack([s // (N_V * N_T), N_L + (s // N_T) % N_V, N_L + N_V + s % N_T], dim=-1)
        syllable = ((idx >= 1) & (idx <= N_SYL))[..., None]
        return self.parts(torch.where(syllable, rows, torch.full_like(rows, N_PARTS))).sum(dim=-2)


class JamoHead(nn.Module):
    """Initial (with every other id), then medial given it, then final given both: log-probabilities of every id."""

    def __init__(self, vocab_size, size, initials="linear"):
        super().__init__()
        self.vocab_size, self.initials = vocab_size, initials
        self.stage1 = nn.Linear(size, N_L + vocab_size - N_SYL, bias=False)
        self.medial_in, self.medial_initial = nn.Linear(size, size), nn.Embedding(N_L, size)
        self.medial_out = nn.Linear(size, N_V, bias=False)
        self.final_in, self.final_initial = nn.Linear(size, size), nn.Embedding(N_L, size)
        self.final_medial, self.final_out = nn.Embedding(N_V, size), nn.Linear(size, N_T, bias=False)
        # each (initial, medial) pair's and each syllable's own read-out row, added to the shared stages' logits
        self.medial_rows = nn.Parameter(torch.zeros(N_L * N_V, size))
        self.final_rows = nn.Parameter(torch.zeros(N_SYL, size))

    def forward(self, h):
        shape, h = h.shape[:-1], h.reshape(-1, h.shape[-1])
        pairs = (h @ self.medial_rows.to(h.dtype).T).view(-1, N_L, N_V)
        l1 = self.stage1(h).float()
        if self.initials == "pairs":  # an initial's score gathers its 21 (initial, medial) rows
            l1 = torch.cat([l1[:, :N_L] + torch.logsumexp(pairs.float(), -1), l1[:, N_L:]], dim=-1)
        s1 = F.log_softmax(l1, dim=-1)
        l2 = self.medial_out(F.gelu(self.medial_in(h)[:, None] + self.medial_initial.weight))
        s2 = F.log_softmax((l2 + pairs).float(), -1)
        pair = (self.final_initial.weight[:, None] + self.final_medial.weight[None]).flatten(0, 1)
        l3 = self.final_out(F.gelu(self.final_in(h)[:, None] + pair))
        l3 = l3 + (h @ self.final_rows.to(h.dtype).T).view(-1, N_L * N_V, N_T)
        s3 = F.log_softmax(l3.float(), -1).view(-1, N_L, N_V, N_T)
        syllables = (s1[:, :N_L, None, None] + s2[..., None] + s3).flatten(1)
        others = s1[:, N_L:]
        return torch.cat([others[:, :1], syllables, others[:, 1:]], dim=-1).view(*shape, self.vocab_size)


def _norm(kind, size):
    return {"rmsnorm": nn.RMSNorm, "layernorm": nn.LayerNorm}[kind](size)


def _check_kinds(c):
    for key, kinds in KINDS.items():
        if getattr(c, key) not in kinds:
            raise ValueError(
                f"{key}={getattr(c, key)!r}: this folder's modeling code computes only "
                f"{', '.join(kinds)}; export the run with the kochar-gpt version that trained it"
            )


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1)


class Head(nn.Module):
    def __init__(self, embedding_size, head_dim):
        super().__init__()
        self.query = nn.Linear(embedding_size, head_dim, bias=False)
        self.key = nn.Linear(embedding_size, head_dim, bias=False)
        self.value = nn.Linear(embedding_size, head_dim, bias=False)


def _gate(layer, x):
    """A head gate (model.attention_gate, model.value_embedding) read from x's first channels: (B, H, T, 1)."""
    return torch.sigmoid(layer(x[..., : layer.in_features])).transpose(1, 2).unsqueeze(-1)


class Attention(nn.Module):
    def __init__(self, c, value_embedding=False):
        super().__init__()
        self.num_heads, self.head_dim, self.qk_norm = c.num_heads, c.head_size // c.num_heads, c.qk_norm
        self.rope = c.position == "rope"
        self.heads = nn.ModuleList(Head(c.embedding_size, self.head_dim) for _ in range(c.num_heads))
        self.proj = nn.Linear(c.head_size, c.embedding_size)
        channels = min(GATE_CHANNELS, c.embedding_size)
        self.gate = nn.Linear(channels, c.num_heads, bias=False) if c.attention_gate else None
        self.value_embed = nn.Linear(c.embedding_size, c.head_size, bias=False) if value_embedding else None
        self.value_gate = nn.Linear(channels, c.num_heads, bias=False) if value_embedding else None

    def forward(self, x, x0):
        B, T, _ = x.shape
        w = torch.cat([torch.cat([h.query.weight, h.key.weight, h.value.weight]) for h in self.heads])
        qkv = (x @ w.t()).view(B, T, self.num_heads, 3, self.head_dim).permute(3, 0, 2, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (B, H, T, D)
        if self.value_embed is not None:  # the embedding's projection joins the values, times 2 sigmoid(gate)
            ve = self.value_embed(x0).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
            v = v + ve * 2 * _gate(self.value_gate, x)
        if self.qk_norm:
            q, k = F.rms_norm(q, (self.head_dim,)), F.rms_norm(k, (self.head_dim,))
        if self.rope:
            dims = torch.arange(0, self.head_dim, 2, dtype=torch.float64, device=x.device)
            inv = ROPE_BASE ** (-dims / self.head_dim)
            angles = torch.arange(T, dtype=torch.float64, device=x.device)[:, None] * inv[None]
            cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        if self.gate is not None:
            y = y * _gate(self.gate, x)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.kind = c.mlp
        self.fc = nn.Linear(c.embedding_size, 2 * c.mlp_hidden if c.mlp == "swiglu" else c.mlp_hidden)
        self.proj = nn.Linear(c.mlp_hidden, c.embedding_size)

    def forward(self, x):
        h = self.fc(x)
        if self.kind == "relu2":
            h = F.relu(h).square()
        elif self.kind == "swiglu":
            gate, value = h.chunk(2, dim=-1)
            h = F.silu(gate) * value
        else:  # gelu (_check_kinds refused any other kind)
            h = F.gelu(h)
        return self.proj(h)


class Block(nn.Module):
    def __init__(self, c, value_embedding=False):
        super().__init__()
        self.ln1, self.attn = _norm(c.norm, c.embedding_size), Attention(c, value_embedding)
        self.ln2, self.ffwd = _norm(c.norm, c.embedding_size), FeedForward(c)

    def forward(self, x, x0):
        x = x + self.attn(self.ln1(x), x0)
        return x + self.ffwd(self.ln2(x))


class KocharForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = KocharConfig
    base_model_prefix = ""
    _no_split_modules = ["Block"]

    def __init__(self, config):
        super().__init__(config)
        c = config
        _check_kinds(c)
        self.token_embedding = nn.Embedding(c.vocab_size, c.embedding_size)
        self.jamo_embedding = JamoEmbedding(c.vocab_size, c.embedding_size) if c.embedding == "jamo" else None
        self.position_embedding = nn.Embedding(c.context_length, c.embedding_size) if c.position == "learned" else None
        # value embeddings on every other block, ending with the last; U-Net skips from the first half to the second
        L = c.num_blocks
        self.blocks = nn.ModuleList(Block(c, c.value_embedding and (L - 1 - i) % 2 == 0) for i in range(L))
        self.skip_weights = nn.Parameter(torch.ones(L // 2)) if c.unet_skips else None
        self.ln_f = _norm(c.norm, c.embedding_size)
        self.lm_head = nn.Linear(c.embedding_size, c.vocab_size, bias=False) if c.head == "softmax" else None
        self.jamo_head = JamoHead(c.vocab_size, c.embedding_size, c.jamo_initials) if c.head == "jamo" else None
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def get_input_embeddings(self):
        return self.token_embedding

    def get_output_embeddings(self):
        return self.lm_head  # None with the staged head: it has no output matrix

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask, "last_only": True}

    def forward(self, input_ids, attention_mask=None, labels=None, last_only=False, **kwargs):
        # attention_mask is accepted for generate()'s sake; unpadded batches (all ones) are what this computes
        idx = input_ids[:, -self.config.context_length :]  # the window the model sees
        x = self.token_embedding(idx)
        if self.jamo_embedding is not None:
            x = x + self.jamo_embedding(idx)
        if self.position_embedding is not None:
            x = x + self.position_embedding(torch.arange(idx.shape[1], device=idx.device))
        x0, half, skips = x, len(self.blocks) // 2, []
        for i, block in enumerate(self.blocks):
            if self.skip_weights is not None and i >= half and skips:
                x = x + self.skip_weights[i - half] * skips.pop()
            x = block(x, x0)
            if self.skip_weights is not None and i < half:
                skips.append(x)
        x = self.ln_f(x[:, -1:] if last_only else x)  # generate() reads the last position only
        logits = self.lm_head(x) if self.jamo_head is None else self.jamo_head(x)  # the staged head: log-probabilities
        if self.config.logit_softcap:
            logits = self.config.logit_softcap * torch.tanh(logits / self.config.logit_softcap)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1))
        return CausalLMOutputWithPast(loss=loss, logits=logits)
