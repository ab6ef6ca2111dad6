"""The report as a reader sees it: `attncheck report` writes a report of a small results folder (and one of
the layer x head maps of a probe --json output), and a real
browser (headless Chromium) loads it. The page must load without an error (script, resource or parse), every
figure's SVG must be laid out with a nonzero size, and every PNG the page links to must decode to a nonzero
image. Exit 77 (skipped) without Chromium.

A copy of index.html gets the checking script and an <img> per linked PNG: the report itself carries no
script and no image by reference, so the check cannot sit in it."""
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

binary, data = sys.argv[1], Path(sys.argv[2])
browser = next((shutil.which(name) for name in ("chromium", "chromium-browser") if shutil.which(name)), None)
if browser is None:
    print("SKIPPED: chromium is not installed (Debian package chromium, scripts/deps/reports.list)")
    sys.exit(77)

CHECK = """<script>
window.checkErrors = [];
window.addEventListener('error', e => {
  const where = e.target && e.target !== window ? (e.target.src || e.target.href || e.target.tagName) : '';
  window.checkErrors.push(String(e.message || 'resource failed to load') + ' ' + where);
}, true);
window.addEventListener('load', () => {
  const box = el => { const r = el.getBoundingClientRect(); return [r.width, r.height]; };
  const result = {
    errors: window.checkErrors,
    figures: document.querySelectorAll('figure').length,
    svgs: Array.from(document.querySelectorAll('figure svg')).map(box),
    drawn: Array.from(document.querySelectorAll('figure svg')).map(s => s.querySelectorAll('path').length),
    pngs: Array.from(document.querySelectorAll('img.check')).map(i => [i.getAttribute('src'), i.naturalWidth, i.naturalHeight]),
  };
  const out = document.createElement('pre');
  out.id = 'browser-check';
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
</script>"""


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def check_report(tmp, inputs, name):
    """Writes the report of `inputs` and checks it in the browser; returns the line to print."""
    report = tmp / name
    run = subprocess.run([binary, "report", *[str(data / i) for i in inputs], "--out", str(report)],
                         capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        fail(f"attncheck report exited {run.returncode}: {run.stderr}")
    page = (report / "index.html").read_text()
    links = [html.unescape(link) for link in re.findall(r'<a href="([^"]+\.png)">PNG</a>', page)]
    figures = page.count("<figure>")
    if figures == 0 or len(links) != figures:
        fail(f"{figures} figures but {len(links)} PNG links in index.html")
    images = "".join(f'<img class="check" src="{html.escape(link)}" alt="">' for link in links)
    checked = page.replace("<head>", "<head>\n" + CHECK, 1).replace("</body>", images + "\n</body>", 1)
    (report / "browser-check.html").write_text(checked)
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          f"--user-data-dir={tmp / ('profile-' + name)}", "--allow-file-access-from-files",
                          "--virtual-time-budget=10000", "--dump-dom", (report / "browser-check.html").as_uri()],
                         capture_output=True, text=True, timeout=50)
    found = re.search(r'<pre id="browser-check">(.*?)</pre>', dom.stdout, re.S)
    if not found:
        fail(f"the page never finished loading (exit {dom.returncode}): {dom.stderr[-2000:]}")
    result = json.loads(html.unescape(found.group(1)))
    if result["errors"]:
        fail(f"errors while loading the page: {result['errors']}")
    if result["figures"] != figures or len(result["svgs"]) != figures:
        fail(f"the browser sees {result['figures']} figures and {len(result['svgs'])} SVGs; the page has {figures}")
    for k, ((width, height), paths) in enumerate(zip(result["svgs"], result["drawn"])):
        if not (width > 100 and height > 100):
            fail(f"figure {k + 1} is laid out at {width} x {height} px")
        if paths == 0:
            fail(f"figure {k + 1}'s SVG draws nothing")
    if len(result["pngs"]) != len(links):
        fail(f"{len(result['pngs'])} of {len(links)} PNG images reached the page")
    for src, width, height in result["pngs"]:
        if not (width > 100 and height > 100):
            fail(f"{src} decodes to {width} x {height} px")
    return (f"{name}: {figures} figures laid out ({', '.join(f'{w:.0f}x{h:.0f}' for w, h in result['svgs'])} px), "
            f"{len(links)} PNGs decoded, no error while loading")


with tempfile.TemporaryDirectory(prefix="attncheck-browser-") as tmp:
    tmp = Path(tmp)
    # The scaling report, and the layer x head maps of a real probe --json output (all-MiniLM-L6-v2).
    results = [check_report(tmp, ["c3-small"], "report"), check_report(tmp, ["probe-minilm.json"], "head-maps")]
    print("ok:", "; ".join(results))
