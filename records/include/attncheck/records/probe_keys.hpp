#pragma once
// The keys of a probe-log line (attncheck-probe.jsonl, docs/results-format.md) that `probe --watch` writes and
// `attncheck report` reads back: named once here so that writer and reader cannot drift apart.

namespace attncheck::records::probe_keys {

// Where the line was measured.
inline constexpr const char* checkpoint = "checkpoint";
inline constexpr const char* step = "step";
inline constexpr const char* activation = "activation";
inline constexpr const char* layer = "layer";
inline constexpr const char* head = "head";
inline constexpr const char* N = "N";

// ||A||_F of the attention map under each activation evaluated on the same scores, ||dA/dS||_F of each, and
// softmax's Jacobians in W_Q and W_K.
inline constexpr const char* softmax_fro = "softmax_fro";
inline constexpr const char* poly3_scaled_fro = "poly3_scaled_fro";
inline constexpr const char* poly3_fro = "poly3_fro";
inline constexpr const char* relu_n_fro = "relu_n_fro";
inline constexpr const char* grad_fro = "grad_fro";
inline constexpr const char* poly3_scaled_grad_fro = "poly3_scaled_grad_fro";
inline constexpr const char* poly3_grad_fro = "poly3_grad_fro";
inline constexpr const char* relu_n_grad_fro = "relu_n_grad_fro";
inline constexpr const char* dWq_fro = "dWq_fro";
inline constexpr const char* dWk_fro = "dWk_fro";

}  // namespace attncheck::records::probe_keys
