#!/usr/bin/python3
"""NumPy and Pillow reference for `attncheck probe --image`: Hugging Face's image processors
(ViTImageProcessor, BitImageProcessor) resize with Pillow's Image.resize, center crop, rescale and normalize
with NumPy; this is the same sequence, in float64.

  compare BIN MODEL_DIR
      Writes scikit-learn's sample photographs (china.jpg, flower.jpg, decoded by Pillow) losslessly as PPM
      and PNG files, and for several preprocessor_config.json files (DINOv2's shortest edge 256 bicubic with a
      224 center crop, an exact bilinear resize to a non-square size with mean and std 0.5, a bicubic
      enlargement with a crop, no resize with a crop, and none at all: ImageNet defaults at the model's image
      size) runs
      `BIN probe COPY_OF_MODEL_DIR --image FILE --attention-out ...` and checks the pixel values the probe
      used against this reference: the 8-bit resize bit for bit (Pillow's fixed-point filters), so every
      value within 1e-12.

Exit 0 pass, 1 mismatch, 77 skipped (NumPy, Pillow or scikit-learn absent).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
try:
    import numpy as np
    from PIL import Image
except ImportError as error:
    print(f"SKIPPED: {error} (install python3-numpy python3-pil: scripts/setup probes)")
    sys.exit(SKIP)

IMAGENET = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}


def sample_photograph(name):
    from sklearn.datasets import load_sample_image
    return load_sample_image(name)


def hf_preprocess(rgb, config, image_size=224):
    """Channels-first float64 pixel values of an H x W x 3 uint8 image, as Hugging Face's processors compute
    them (they keep float32)."""
    image = rgb
    if config.get("do_resize", True):
        size = config.get("size", image_size)
        if isinstance(size, int):
            height, width = size, size
        elif "shortest_edge" in size:
            h, w = image.shape[:2]
            short, long = (w, h) if w <= h else (h, w)
            new_short, new_long = size["shortest_edge"], int(size["shortest_edge"] * long / short)
            height, width = (new_long, new_short) if w <= h else (new_short, new_long)
        else:
            height, width = size["height"], size["width"]
        image = np.array(Image.fromarray(image).resize((width, height), resample=config.get("resample", 2)))
    if config.get("do_center_crop", False):
        crop = config["crop_size"]
        crop_h, crop_w = (crop, crop) if isinstance(crop, int) else (crop["height"], crop["width"])
        top, left = (image.shape[0] - crop_h) // 2, (image.shape[1] - crop_w) // 2
        image = image[top:top + crop_h, left:left + crop_w]
    pixels = image.astype(np.float64)
    if config.get("do_rescale", True):
        pixels = pixels * config.get("rescale_factor", 1 / 255)
    if config.get("do_normalize", True):
        mean = np.array(config.get("image_mean", IMAGENET["image_mean"]), dtype=np.float64)
        std = np.array(config.get("image_std", IMAGENET["image_std"]), dtype=np.float64)
        pixels = (pixels - mean) / std
    return pixels.transpose(2, 0, 1)


CASES = {
    "dinov2": {"do_resize": True, "size": {"shortest_edge": 256}, "resample": 3, "do_center_crop": True,
               "crop_size": {"height": 224, "width": 224}, "do_rescale": True, "rescale_factor": 1 / 255,
               "do_normalize": True, **IMAGENET},
    "vit-bilinear": {"do_resize": True, "size": {"height": 60, "width": 84}, "resample": 2, "do_rescale": True,
                     "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5],
                     "image_std": [0.5, 0.5, 0.5]},
    "upscale-bicubic": {"do_resize": True, "size": {"height": 450, "width": 700}, "resample": 3,
                        "do_center_crop": True, "crop_size": {"height": 36, "width": 48}},
    "crop-only": {"do_resize": False, "do_center_crop": True, "crop_size": 90, "do_normalize": False},
    "defaults": None,
}


def compare(binary, model_dir):
    try:
        photographs = {name: sample_photograph(name) for name in ("china.jpg", "flower.jpg")}
    except ImportError as error:
        print(f"SKIPPED: {error} (install python3-sklearn python3-pil: scripts/setup probes)")
        return SKIP
    image_size = json.load(open(os.path.join(model_dir, "config.json")))["image_size"]
    failures, checked = 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for case, config in CASES.items():
            folder = os.path.join(tmp, case)
            shutil.copytree(model_dir, folder)
            if config is not None:
                json.dump(config, open(os.path.join(folder, "preprocessor_config.json"), "w"))
            reference_config = config if config is not None else {"size": image_size, "resample": 3, **IMAGENET}
            for name, rgb in photographs.items():
                for extension in ("ppm", "png"):
                    image_file = os.path.join(tmp, f"{os.path.splitext(name)[0]}.{extension}")
                    if not os.path.exists(image_file):
                        Image.fromarray(rgb).save(image_file)
                    dump = os.path.join(tmp, "dump.safetensors")
                    command = [binary, "probe", folder, "--image", image_file, "--layers", "0", "--heads", "0",
                               "--json", "--attention-out", dump]
                    run = subprocess.run(command, capture_output=True, text=True)
                    if run.returncode != 0:
                        print(f"FAIL: {' '.join(command)} exited {run.returncode}: {run.stderr}")
                        failures += 1
                        continue
                    from torch_reference import read_safetensors
                    ours = read_safetensors(dump)["pixel_values"]
                    expected = hf_preprocess(rgb, reference_config, image_size)
                    if ours.shape != expected.shape:
                        print(f"FAIL: {case} {image_file}: pixels {ours.shape}, reference {expected.shape}")
                        failures += 1
                        continue
                    diff = float(np.max(np.abs(ours - expected)))
                    checked += 1
                    if diff > 1e-12:
                        print(f"FAIL: {case} {os.path.basename(image_file)}: max |pixel difference| {diff:.3e} > 1e-12")
                        failures += 1
    print(f"image preprocessing: {checked} image x configuration pairs ({', '.join(CASES)}) equal to the "
          f"Pillow + NumPy reference within 1e-12")
    return 1 if failures else 0


def main(argv):
    if len(argv) == 3 and argv[0] == "compare":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        return compare(argv[1], argv[2])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
