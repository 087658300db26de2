"""kochar-gpt's model settings as a `transformers` config, shipped where no stock class fits (`trust_remote_code`)."""

try:
    from transformers import PreTrainedConfig
except ImportError:  # transformers 4.x
    from transformers import PretrainedConfig as PreTrainedConfig


class KocharConfig(PreTrainedConfig):
    model_type = "kochar_gpt"

    def __init__(
        self,
        vocab_size=100,
        context_length=128,
        embedding_size=128,
        head_size=128,
        num_heads=4,
        num_blocks=4,
        position="learned",
        norm="layernorm",
        mlp="gelu",
        qk_norm=False,
        mlp_hidden=512,
        tie_weights=False,
        embedding="token",
        head="softmax",
        jamo_initials="linear",
        attention_gate=False,
        value_embedding=False,
        unet_skips=False,
        logit_softcap=0.0,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.context_length = context_length
        self.max_position_embeddings = context_length
        self.embedding_size = embedding_size
        self.hidden_size = embedding_size
        self.head_size = head_size
        self.num_heads = num_heads
        self.num_attention_heads = num_heads
        self.num_blocks = num_blocks
        self.num_hidden_layers = num_blocks
        self.position = position
        self.norm = norm
        self.mlp = mlp
        self.qk_norm = qk_norm
        self.mlp_hidden = mlp_hidden
        self.tie_weights = tie_weights
        self.embedding = embedding
        self.head = head
        self.jamo_initials = jamo_initials  # folders exported before it existed hold the first version, linear
        self.attention_gate = attention_gate  # the data-limited levers: folders exported before them have none
        self.value_embedding = value_embedding
        self.unet_skips = unet_skips
        self.logit_softcap = logit_softcap
        kwargs.setdefault("tie_word_embeddings", tie_weights)
        super().__init__(**kwargs)
