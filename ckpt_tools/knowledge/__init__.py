"""The knowledge kept as data in rules/, loaded into frozen, typed objects: one module per data file.

| module | file | main accessors |
|---|---|---|
| `architectures` | architectures.toml | `families()`, `family_for(arch, model_type)`, `markers()`, `is_explicit(...)` |
| `dtypes` | dtypes.toml | `dtype_support()` |
| `quant_formats` | formats.toml | `formats()`, `format_for(method)`, `unsupported_hints()`, `made_by_table()` |
| `hardware` | hardware.toml | `profiles()`, `hardware(id)` |
| `kernels` | kernels.toml | `kernel_table()`: the kernel selection per scheme, layer kind and GPU (applied by `ckpt_tools/kernels.py`) |
| `kv_scales` | kv_scales.toml | `spellings()`, `classify(name)`, `is_kv_scale_name(name)`, `attention()`, `kv_runtime(id)` |
| `layouts` | layouts.toml | `foreign_layouts()`, `component_expectations()`, `alternate_weights()` |
| `memory` | memory.toml | `memory()` |
| `modules` | modules.toml | `fused_groups_for(family)`, `parallel()`, `model_unquantized()`, `model_config()` |
| `scales` | scales.toml | `schemes()`, `scheme_for(...)`, `global_scale_conventions()`, `input_global_suffixes()` |
| `serving` | serving.toml | `serving()`: families, pairings, drafters, docker options, context-length keys |
| `transformers` | transformers.toml | `transformers_classes()` |
| `runtimes` | runtimes/*.toml | `runtime(id)`, `runtime_ids()`, `default_runtime_id()`, `runtime_for_image(image)` |

Every module parses its file once per process, on first use, through `_load` (the one validating reader: unknown
keys, wrong types and missing keys are `KnowledgeError`s naming the file and line). Nothing here is imported until a
command needs it: this `__init__` imports nothing. Schemas: rules/README.md.
"""
