// The model families the probes read: a new family's adapter is added here, once, by name.

#include "adapters.hpp"

namespace attncheck::probes::detail {

// Each defined in the family's own file.
extern const FamilyAdapter bert_adapter, roberta_adapter, distilbert_adapter, gpt2_adapter, llama_adapter,
    mistral_adapter, qwen2_adapter, qwen3_adapter, gemma_adapter, gemma2_adapter, gemma3_adapter, vit_adapter,
    dinov2_adapter, clip_vision_adapter, clip_text_adapter, gptneox_adapter, phi3_adapter;

std::span<const FamilyAdapter* const> family_adapters() {
  static constexpr const FamilyAdapter* adapters[]{&bert_adapter,    &roberta_adapter,     &distilbert_adapter,
                                                   &gpt2_adapter,    &llama_adapter,       &mistral_adapter,
                                                   &qwen2_adapter,   &qwen3_adapter,       &gemma_adapter,
                                                   &gemma2_adapter,  &gemma3_adapter,      &vit_adapter,
                                                   &dinov2_adapter,  &clip_vision_adapter, &clip_text_adapter,
                                                   &gptneox_adapter, &phi3_adapter};
  return adapters;
}

}  // namespace attncheck::probes::detail
