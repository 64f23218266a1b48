"""GPT-2 and Llama built op by op with trellis.Graph: the models the
config importer (lib/Frontend/ModelImporter.cpp) builds, the same names,
layouts and parts, for the tests that compare the ways a model is made."""

import math
from typing import Any, Dict

import trellis


def _linear(g: trellis.Graph, x: Any, weight: Any, out_in: bool,
            bias: Any = None) -> Any:
    y = g.op("matmul", x, weight, transpose_rhs=out_in)
    return g.op("add", y, bias) if bias is not None else y


def gpt2(config: Dict[str, Any], batch: int, seq: int) -> trellis.Model:
    e, h, v = config["n_embd"], config["n_head"], config["vocab_size"]
    layers, positions = config["n_layer"], config["n_positions"]
    f = config.get("n_inner") or 4 * e
    d = e // h
    eps = config.get("layer_norm_epsilon", 1e-5)
    std = config.get("initializer_range", 0.02)
    normal, residual = f"normal:{std}", f"normal:{std / math.sqrt(2 * layers)}"
    g = trellis.Graph()
    table = g.parameter("transformer.wte.weight", (v, e), init=normal)
    tokens = g.input("tokens", (batch, seq))
    targets = g.input("targets", (batch, seq))

    def layer_norm(x: Any, prefix: str) -> Any:
        weight = g.parameter(prefix + ".weight", (e,), init="ones")
        bias = g.parameter(prefix + ".bias", (e,), init="zeros")
        return g.op("layer_norm", x, weight, bias, epsilon=eps)

    with g.part("embedding"):
        x = g.op("embedding", table, tokens)
        wpe = g.parameter("transformer.wpe.weight", (positions, e), init=normal)
        x = g.op("add", x, g.op("embedding", wpe, g.op("positions", length=seq)))
    for layer in range(layers):
        prefix = f"transformer.h.{layer}"
        with g.part("layer", layer):
            hidden = layer_norm(x, prefix + ".ln_1")
            qkv_w = g.parameter(prefix + ".attn.c_attn.weight", (e, 3, e),
                                init=normal, file_shape=(e, 3 * e))
            qkv_b = g.parameter(prefix + ".attn.c_attn.bias", (3, e),
                                init="zeros", file_shape=(3 * e,))

            def head(i: int) -> Any:
                w = g.op("reshape", g.op("slice", qkv_w, offsets=[0, i, 0],
                                         sizes=[e, 1, e]), shape=[e, e])
                b = g.op("reshape", g.op("slice", qkv_b, offsets=[i, 0],
                                         sizes=[1, e]), shape=[e])
                return g.op("reshape", _linear(g, hidden, w, False, b),
                            shape=[batch, seq, h, d])

            attention = g.op("attention", head(0), head(1), head(2),
                             scale=1 / math.sqrt(d),
                             causal=trellis.Attr("true"))
            proj_w = g.parameter(prefix + ".attn.c_proj.weight", (e, e),
                                 init=residual)
            proj_b = g.parameter(prefix + ".attn.c_proj.bias", (e,),
                                 init="zeros")
            x = g.op("add", x, _linear(
                g, g.op("reshape", attention, shape=[batch, seq, e]), proj_w,
                False, proj_b))
            hidden = layer_norm(x, prefix + ".ln_2")
            fc_w = g.parameter(prefix + ".mlp.c_fc.weight", (e, f), init=normal)
            fc_b = g.parameter(prefix + ".mlp.c_fc.bias", (f,), init="zeros")
            up = g.op("gelu_tanh", _linear(g, hidden, fc_w, False, fc_b))
            down_w = g.parameter(prefix + ".mlp.c_proj.weight", (f, e),
                                 init=residual)
            down_b = g.parameter(prefix + ".mlp.c_proj.bias", (e,),
                                 init="zeros")
            x = g.op("add", x, _linear(g, up, down_w, False, down_b))
    with g.part("head"):
        x = layer_norm(x, "transformer.ln_f")
        logits = _linear(g, x, table, True)
        loss = g.op("cross_entropy", logits, targets)
    return g.finish(loss)


def llama(config: Dict[str, Any], batch: int, seq: int) -> trellis.Model:
    e, hq = config["hidden_size"], config["num_attention_heads"]
    hkv = config.get("num_key_value_heads") or hq
    d = config.get("head_dim") or e // hq
    f, v = config["intermediate_size"], config["vocab_size"]
    layers = config["num_hidden_layers"]
    eps = config.get("rms_norm_eps", 1e-6)
    theta = config.get("rope_theta", 10000.0)
    normal = f"normal:{config.get('initializer_range', 0.02)}"
    frequencies = [theta ** (-2 * i / d) for i in range(d // 2)]
    g = trellis.Graph()
    table = g.parameter("model.embed_tokens.weight", (v, e), init=normal)
    tokens = g.input("tokens", (batch, seq))
    targets = g.input("targets", (batch, seq))

    def rms_norm(x: Any, name: str) -> Any:
        return g.op("rms_norm", x, g.parameter(name, (e,), init="ones"),
                    epsilon=eps)

    def weight(name: str, shape: Any) -> Any:
        return g.parameter(name, shape, init=normal)

    with g.part("embedding"):
        x = g.op("embedding", table, tokens)
    for layer in range(layers):
        prefix = f"model.layers.{layer}"
        with g.part("layer", layer):
            hidden = rms_norm(x, prefix + ".input_layernorm.weight")
            q = _linear(g, hidden, weight(prefix + ".self_attn.q_proj.weight",
                                          (hq * d, e)), True)
            k = _linear(g, hidden, weight(prefix + ".self_attn.k_proj.weight",
                                          (hkv * d, e)), True)
            val = _linear(g, hidden, weight(prefix + ".self_attn.v_proj.weight",
                                            (hkv * d, e)), True)
            q = g.op("rope", g.op("reshape", q, shape=[batch, seq, hq, d]),
                     frequencies=frequencies)
            k = g.op("rope", g.op("reshape", k, shape=[batch, seq, hkv, d]),
                     frequencies=frequencies)
            attention = g.op("attention", q, k,
                             g.op("reshape", val, shape=[batch, seq, hkv, d]),
                             scale=1 / math.sqrt(d),
                             causal=trellis.Attr("true"))
            out = _linear(g, g.op("reshape", attention,
                                  shape=[batch, seq, hq * d]),
                          weight(prefix + ".self_attn.o_proj.weight",
                                 (e, hq * d)), True)
            x = g.op("add", x, out)
            hidden = rms_norm(x, prefix + ".post_attention_layernorm.weight")
            gate = _linear(g, hidden, weight(prefix + ".mlp.gate_proj.weight",
                                             (f, e)), True)
            up = _linear(g, hidden, weight(prefix + ".mlp.up_proj.weight",
                                           (f, e)), True)
            down = _linear(g, g.op("mul", g.op("silu", gate), up),
                           weight(prefix + ".mlp.down_proj.weight", (e, f)),
                           True)
            x = g.op("add", x, down)
    with g.part("head"):
        x = rms_norm(x, "model.norm.weight")
        head = (table if config.get("tie_word_embeddings", False) else
                weight("lm_head.weight", (v, e)))
        loss = g.op("cross_entropy", _linear(g, x, head, True), targets)
    return g.finish(loss)
