#!/usr/bin/env bash
# End-to-end checks of `attncheck probe` on the tiny ViT and DINOv2: the table, the JSON rows, and exit code 2
# with a message naming the bad value for bad images and inputs of the wrong kind.
# Usage: vision_cli_test.sh ATTNCHECK TINY_VISION_DIR TINY_MODELS_DIR
set -uo pipefail
attncheck=$1
vision=$2
tiny=$3
source "$(dirname "$0")/cli_expect.sh"

vit=$vision/tiny-vit
dinov2=$vision/tiny-dinov2
# The table names the architecture and the positions: 1 + 4 x 4 patches of 8 pixels.
expect 0 "ViT model: 2 layers, 4 heads of dimension 4, D = 16.*bidirectional" -- "$attncheck" probe "$vit" --pixels "$vit/pixels.npy"
expect 0 "4 x 4 patches, N = 17 positions" -- "$attncheck" probe "$vit" --pixels "$vit/pixels.npy"
# DINOv2 on 32 x 44 pixels: 5 x 7 patches of 6 (the 2 pixels past the last patch dropped), N = 36.
expect 0 "5 x 7 patches, N = 36 positions" -- "$attncheck" probe "$dinov2" --pixels "$dinov2/pixels.npy"
expect 0 "LayerScale; position embeddings for 24 x 24 pixels, interpolated" -- "$attncheck" probe "$dinov2" --pixels "$dinov2/pixels.npy"
expect 0 "Gaussian embeddings, sigma = .* \(RMS of the position embeddings\)" -- "$attncheck" probe "$vit" --random --length 9
# The JSON rows as for the other architectures: one per layer and head, N and the bound ratios.
out=$("$attncheck" probe "$vit" --pixels "$vit/pixels.npy" --json) || fail "--json exited $?"
/usr/bin/python3 - "$out" "$(dirname "$0")/../../docs/probe-output.schema.json" <<'PY' || fail "JSON rows: $out"
import json, sys
import jsonschema
document = json.loads(sys.argv[1])
jsonschema.validate(document, json.load(open(sys.argv[2])), cls=jsonschema.Draft202012Validator)
assert document["input"]["kind"] == "pixels" and document["input"]["height"] == 32, document["input"]
assert document["model"]["architecture"] == "ViT", document["model"]
rows = document["heads"]
assert len(rows) == 8, len(rows)
assert all(r["N"] == 17 and r["causal"] is False and r["D"] == 16 and r["d"] == 4 for r in rows), rows[0]
assert all(r["softmax_over_sqrt_N"] <= 1 for r in rows)
PY
# An image file preprocessed with the ImageNet defaults at the model's 32 x 32 (no preprocessor_config.json).
/usr/bin/python3 -c "
import sys
w, h = 40, 30
body = bytes((x * 7 + y * 3 + c * 50) % 256 for y in range(h) for x in range(w) for c in range(3))
open(sys.argv[1], 'wb').write(b'P6 %d %d 255\n' % (w, h) + body)" "$work/image.ppm"
expect 0 "no preprocessor_config.json, ImageNet defaults: resize to 32 x 32 bicubic" -- "$attncheck" probe "$vit" --image "$work/image.ppm"

# Bad input: exit 2, naming the value.
expect 2 "ViT takes images, not tokens" -- "$attncheck" probe "$vit" --tokens "$tiny/tiny-bert/tokens.txt"
expect 2 "BERT takes tokens, not images" -- "$attncheck" probe "$tiny/tiny-bert" --pixels "$vit/pixels.npy"
expect 2 "choose one input" -- "$attncheck" probe "$vit" --pixels "$vit/pixels.npy" --image "$work/image.ppm"
expect 2 "an image's positions are 1 \+ its patches" -- "$attncheck" probe "$vit" --pixels "$vit/pixels.npy" --length 5
expect 2 "BERT takes tokens, not images" -- "$attncheck" probe "$tiny/tiny-bert" --image "$work/image.ppm"
/usr/bin/python3 -c "import numpy as np; np.save('$work/matrix.npy', np.zeros((4, 4)))"
expect 2 "matrix.npy: npy array has shape \(4, 4\), expected 3 dimensions" -- "$attncheck" probe "$vit" --pixels "$work/matrix.npy"
/usr/bin/python3 -c "import numpy as np; np.save('$work/two-channels.npy', np.zeros((2, 32, 32)))"
expect 2 "the image has 2 channels, the model takes 3" -- "$attncheck" probe "$vit" --pixels "$work/two-channels.npy"
/usr/bin/python3 -c "import numpy as np; np.save('$work/wrong-size.npy', np.zeros((3, 40, 32)))"
expect 2 "the image is 40 x 32 pixels; this ViT takes 32 x 32" -- "$attncheck" probe "$vit" --pixels "$work/wrong-size.npy"
/usr/bin/python3 -c "import numpy as np; a = np.zeros((3, 32, 32)); a[1, 2, 3] = np.nan; np.save('$work/nan.npy', a)"
expect 2 "pixel value nan at flat index 1091" -- "$attncheck" probe "$vit" --pixels "$work/nan.npy"
# Pixels so large that the patch projection overflows: the cause is named, not a NaN logit.
/usr/bin/python3 -c "import numpy as np; np.save('$work/huge.npy', np.full((3, 32, 32), 1e308))"
expect 2 "the patch embeddings are not finite: pixel values up to 1e.308" -- "$attncheck" probe "$vit" --pixels "$work/huge.npy"
/usr/bin/python3 -c "import numpy as np; np.save('$work/tiny.npy', np.zeros((3, 4, 4)))"
expect 2 "smaller than one 6 x 6 patch" -- "$attncheck" probe "$dinov2" --pixels "$work/tiny.npy"
echo "not an image" >"$work/text.png"
expect 2 "text.png: not an image attncheck reads" -- "$attncheck" probe "$vit" --image "$work/text.png"
# Cut short: refused, never decoded with made-up pixels (once a different result each run).
head -c 1000 "$work/image.ppm" >"$work/cut.ppm"
expect 2 "cut.ppm: the image is cut short" -- "$attncheck" probe "$vit" --image "$work/cut.ppm"
expect 2 "no/such.png: no such file" -- "$attncheck" probe "$vit" --image /no/such.png
cp -r "$vit" "$work/vit-config"
echo '{"do_resize": true, "size": {"height": 32, "width": 32}, "resample": 1}' >"$work/vit-config/preprocessor_config.json"
expect 2 "\"resample\" 1 is not supported" -- "$attncheck" probe "$work/vit-config" --image "$work/image.ppm"
echo '{"do_resize": false, "do_center_crop": true, "crop_size": {"height": 64, "width": 64}}' >"$work/vit-config/preprocessor_config.json"
expect 2 "smaller than the 64 x 64 center crop" -- "$attncheck" probe "$work/vit-config" --image "$work/image.ppm"
echo '{"image_std": [0.5, 0, 0.5]}' >"$work/vit-config/preprocessor_config.json"
expect 2 "\"image_std\" is \[0.5,0,0.5\]: every value must be positive" -- "$attncheck" probe "$work/vit-config" --image "$work/image.ppm"

if [ "$failures" -ne 0 ]; then
  echo "$failures failures"
  exit 1
fi
echo "vision probe CLI: all checks passed"
