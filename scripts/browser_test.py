"""The page of `interlingua serve` in a real browser: headless Chromium driven by Selenium.

Run through scripts/browser-test.sh, which installs Debian's chromium and chromium-driver and the
`browser` extra (selenium) first. Not part of the test suite or CI: it needs a browser installed.

1. Trains two tiny models on Multi30k en/de/fr (copied from ../shared/data/multi30k, else
   downloaded), de<->fr held out so that they are zero-shot: a BiLSTM with an attention bridge
   and a Transformer encoder without one (about half a minute each; kept in --work, by default
   runs/browser-test, and reused).
2. Serves each with `interlingua serve` on 127.0.0.1 (a free port) and opens the page.
3. Checks, through the page, with the keyboard where a user would type: every target language
   gets a translation marked supervised / zero-shot, with the pivot path beside the zero-shot
   one; the bridge heat map has one row per head and one column per subword; the Transformer's
   layer select redraws one map per head; the similarity table is n x n with 1.00 on the diagonal;
   an over-long sentence and an empty one show the service's errors as messages; the browser
   logged no error but the expected 422 answers (a blocked or failed load would be one).
4. Saves screenshots in docs/screenshots/, then stops the servers.
"""
from __future__ import annotations

import argparse
import gzip
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

REPO = Path(__file__).resolve().parents[1]
INTERLINGUA = [sys.executable, "-m", "interlingua.cli"]
LANGS = ["de", "en", "fr"]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1280,2400", "--force-device-scale-factor=1",
                  "--lang=en-US"]

MODELS: dict[str, dict[str, Any]] = {
    # What the tests' tiny models are (tests/conftest.py: tiny_config), on three languages.
    "bridge": {"embed_dim": 64, "encoder": {"type": "bilstm", "hidden": 96, "layers": 1},
               "bridge": {"type": "attention", "heads": 6, "hidden": 32},
               "decoder": {"type": "lstm", "hidden": 96, "layers": 1}, "dropout": 0.0},
    "transformer": {"embed_dim": 64, "encoder": {"type": "transformer", "layers": 2, "heads": 4},
                    "bridge": {"type": "none"}, "decoder": {"type": "transformer", "layers": 1, "heads": 4},
                    "dropout": 0.0},
}


class CheckFailed(AssertionError):
    """What the page did not do."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise CheckFailed(what)
    print(f"  ok: {what}")


# --- a tiny model ---------------------------------------------------------------------------------------


def corpus(work: Path) -> Path:
    """Multi30k through `interlingua data multi30k` (a checksummed local copy, or a download)."""
    dest = work / "multi30k"
    if not (dest / "corpus.yaml").is_file():
        local = REPO.parent / "shared" / "data" / "multi30k"
        command = [*INTERLINGUA, "data", "multi30k", "--dest", str(dest)]
        subprocess.run(command + (["--from", str(local)] if local.is_dir() else []), check=True, cwd=REPO)
    return dest / "corpus.yaml"


def trained_model(work: Path, kind: str, steps: int) -> Path:
    """`interlingua train` on a tiny config (reused when its checkpoint is there)."""
    run = work / kind
    best = run / "best.pt"
    if best.is_file():
        print(f"== model '{kind}': {best} (already trained)")
        return best
    config = {
        "name": f"browser-{kind}", "corpus": str(corpus(work)), "work_dir": str(run),
        "preprocess": {"vocab_size": 500, "max_train_sentences": 300, "max_valid_sentences": 20, "max_len": 40},
        "directions": {"mode": "many2many", "languages": LANGS, "monolingual": True,
                       "held_out": [["de", "fr"], ["fr", "de"]]},
        "model": MODELS[kind],
        "train": {"max_steps": steps, "valid_every": steps, "log_every": 100, "batch_size": 25, "lr": 0.005,
                  "seed": 7, "threads": 1},
    }
    run.mkdir(parents=True, exist_ok=True)
    path = run / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    print(f"== model '{kind}': training {steps} steps ({path})")
    started = time.monotonic()
    subprocess.run([*INTERLINGUA, "train", str(path)], check=True, cwd=REPO)
    print(f"   trained in {time.monotonic() - started:.0f} s")
    if not best.is_file():
        raise CheckFailed(f"training wrote no {best}")
    return best


def training_sentence(work: Path, lang: str, index: int) -> str:
    """A line the tiny model was trained on (it translates those; new sentences are beyond it)."""
    with gzip.open(work / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as lines:
        for i, line in enumerate(lines):
            if i == index:
                return line.strip()
    raise CheckFailed(f"train.{lang} has fewer than {index + 1} lines")


# --- the server -------------------------------------------------------------------------------------------


@contextmanager
def served(model: Path, log: Path) -> Iterator[str]:
    """`interlingua serve` on a free loopback port until the block ends (then SIGTERM, and it must exit 0)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    shown = model.relative_to(REPO) if model.is_relative_to(REPO) else model  # the path the page shows
    with log.open("wb") as out:
        server = subprocess.Popen([*INTERLINGUA, "serve", "--model", str(shown), "--port", "0", "--threads", "1"],
                                  cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while not (found := re.search(r"on http://127\.0\.0\.1:(\d+) ", log.read_text(errors="replace"))):
            if server.poll() is not None or time.monotonic() > deadline:
                raise CheckFailed(f"interlingua serve did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{found.group(1)}"
    finally:
        server.terminate()
        code = server.wait(60)
    if code != 0:
        raise CheckFailed(f"interlingua serve exited {code}:\n{log.read_text(errors='replace')}")


# --- the browser ------------------------------------------------------------------------------------------


def browser(chromium: str, chromedriver: str, profile: Path) -> WebDriver:
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))


def wait(driver: WebDriver, condition: Callable[[WebDriver], Any], what: str, seconds: float = 60) -> Any:
    try:
        return WebDriverWait(driver, seconds, poll_frequency=0.1).until(condition)
    except Exception as err:  # TimeoutException, or what the condition raised
        raise CheckFailed(f"timed out waiting for {what} ({type(err).__name__})") from None


def press(driver: WebDriver, *keys: str) -> None:
    """Keys sent to whatever has the focus, as a keyboard would (each pressed and released)."""
    webdriver.ActionChains(driver).send_keys(*keys).perform()


def chord(driver: WebDriver, modifier: str, key: str) -> None:
    """`key` with `modifier` held down (Ctrl+A, Ctrl+Enter) on whatever has the focus."""
    webdriver.ActionChains(driver).key_down(modifier).send_keys(key).key_up(modifier).perform()


def focused(driver: WebDriver) -> WebElement:
    return driver.switch_to.active_element


def tab_to(driver: WebDriver, element_id: str, most: int = 40, backwards: bool = False) -> None:
    """Press Tab (Shift+Tab `backwards`) until `element_id` has the focus."""
    for _ in range(most):
        if focused(driver).get_attribute("id") == element_id:
            return
        if backwards:
            chord(driver, Keys.SHIFT, Keys.TAB)
        else:
            press(driver, Keys.TAB)
    raise CheckFailed(f"Tab never reached #{element_id}")


def messages(driver: WebDriver, region: str) -> list[str]:
    return [p.text for p in driver.find_elements(By.CSS_SELECTOR, f"#{region} .message")]


def screenshot(driver: WebDriver, element: WebElement, path: Path) -> None:
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", element)
    path.parent.mkdir(parents=True, exist_ok=True)
    element.screenshot(str(path))
    print(f"  screenshot: {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")


def console_errors(driver: WebDriver) -> list[str]:
    """SEVERE browser log lines, less the 422 answers the error checks ask for on purpose."""
    return [entry["message"] for entry in driver.get_log("browser")
            if entry["level"] == "SEVERE" and "status of 422" not in entry["message"]]


def cell_weight(cell: WebElement) -> float:
    """The weight a heat-map cell stands for (its title ends in it, to 3 decimals)."""
    return float(cell.get_attribute("title").rsplit(":", 1)[1])


def cell_darkness(cell: WebElement) -> int:
    """765 - r - g - b of the cell's background: the more weight, the darker."""
    rgb = re.findall(r"\d+", cell.value_of_css_property("background-color"))[:3]
    return 765 - sum(int(c) for c in rgb)


def translations_done(driver: WebDriver) -> bool:
    rows = driver.find_elements(By.CSS_SELECTOR, "#translations tbody tr")
    return bool(rows) and not driver.find_elements(By.CSS_SELECTOR, "#translations .pending")


# --- the checks ---------------------------------------------------------------------------------------------


def check_bridge_model(driver: WebDriver, base: str, sentence: str, other: str, shots: Path) -> None:
    driver.get(base + "/")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#source-lang option"), "the languages")
    check("attention bridge, 6 heads" in driver.find_element(By.ID, "model-info").text, "the page names the model")

    # Keyboard only: Tab to the sentence, type it, Tab to the language and pick German by typing,
    # Tab to the button and press Enter.
    driver.find_element(By.TAG_NAME, "body").click()
    tab_to(driver, "source-text")
    chord(driver, Keys.CONTROL, "a")
    press(driver, Keys.DELETE, sentence)
    tab_to(driver, "source-lang")
    press(driver, "g")
    check(driver.find_element(By.ID, "source-lang").get_attribute("value") == "de",
          "typing 'g' on the focused language select picks German")
    tab_to(driver, "translate-button")
    press(driver, Keys.ENTER)
    wait(driver, translations_done, "the translations")

    rows = {row.get_attribute("data-tgt"): row
            for row in driver.find_elements(By.CSS_SELECTOR, "#translations tbody tr")}
    check(sorted(rows) == ["en", "fr"], f"a row for every target language but the source: {sorted(rows)}")
    outputs = {tgt: row.find_element(By.CSS_SELECTOR, "td.output").text for tgt, row in rows.items()}
    check(all(text and text != "no translation" for text in outputs.values()),
          f"every target has a translation: {outputs}")
    kinds = {tgt: row.find_element(By.CSS_SELECTOR, ".badge").text for tgt, row in rows.items()}
    check(kinds == {"en": "supervised", "fr": "zero-shot"}, f"de->en supervised, de->fr zero-shot: {kinds}")
    pivot = rows["fr"].find_element(By.CSS_SELECTOR, "td.pivot-col").text
    check("de → en → fr" in pivot and len(pivot.split("\n")) == 2,
          f"the pivot path beside the zero-shot one: {pivot!r}")
    check(not driver.find_elements(By.CSS_SELECTOR, "#translate-messages .error"), "no error message")

    # The bridge heat map: heads x subwords, coloured.
    table = wait(driver, lambda d: d.find_element(By.ID, "bridge-heatmap"), "the bridge heat map")
    heads = table.find_elements(By.CSS_SELECTOR, "tbody tr")
    tokens = table.find_elements(By.CSS_SELECTOR, "thead th.token")
    check(len(heads) == 6 and len(tokens) >= 5, f"one row per head (6) and a column per subword ({len(tokens)})")
    weights = [[(cell_weight(cell), cell_darkness(cell)) for cell in head.find_elements(By.CSS_SELECTOR, "td.cell")]
               for head in heads]
    check(all(len(row) == len(tokens) for row in weights), "a cell for every head and subword")
    check(all(abs(sum(w for w, _ in row) - 1) < 0.02 for row in weights), "each head's weights sum to 1")
    check(all(max(row)[1] == max(d for _, d in row) for row in weights),
          "each head's largest weight is its darkest cell")
    check(not driver.find_element(By.ID, "layer-controls").is_displayed(), "no layer select for a BiLSTM encoder")

    screenshot(driver, driver.find_element(By.ID, "translate"), shots / "translate.png")
    screenshot(driver, driver.find_element(By.ID, "bridge"), shots / "bridge.png")

    # Across languages: the sentence and its translations, compared (keyboard: Tab + Enter on the buttons).
    tab_to(driver, "use-translations")
    press(driver, Keys.ENTER)
    rows_in = driver.find_elements(By.CSS_SELECTOR, "#similarity-rows li")
    check(len(rows_in) == 3, "the sentence and its two translations fill three rows")
    tab_to(driver, "add-row", backwards=True)
    press(driver, Keys.ENTER)
    check(focused(driver).get_attribute("class") == "sim-text", "a new row takes the focus")
    press(driver, other, Keys.TAB, "e")  # the sentence, then its language: English
    check(focused(driver).get_attribute("value") == "en", "typing 'e' on the row's language select picks English")
    tab_to(driver, "compare-button")
    press(driver, Keys.ENTER)
    table = wait(driver, lambda d: d.find_element(By.ID, "similarity-table"), "the similarity table")
    values = [[cell.text for cell in row.find_elements(By.CSS_SELECTOR, "td.cell")]
              for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    check(len(values) == 4 and all(len(row) == 4 for row in values), "a 4 x 4 similarity table")
    check(all(values[i][i] == "1.00" for i in range(4)), "1.00 on the diagonal")
    check(all(values[i][j] == values[j][i] for i in range(4) for j in range(4)), "a symmetric table")
    unlabelled = driver.execute_script(
        "return [...document.querySelectorAll('input, select, textarea')].filter(c => !c.labels.length).map(c => c.id)")
    check(not unlabelled, f"every control on the page has a <label>, the added rows' too: {unlabelled}")
    screenshot(driver, driver.find_element(By.ID, "across"), shots / "similarity.png")
    screenshot(driver, driver.find_element(By.TAG_NAME, "body"), shots / "page.png")

    # Errors are messages: an empty sentence to compare, then an over-long sentence to translate.
    first = driver.find_element(By.CSS_SELECTOR, "#similarity-rows li .sim-text")
    first.clear()
    first.send_keys(Keys.ENTER)  # Enter in a text field submits its form
    wait(driver, lambda d: any("empty" in m for m in messages(d, "similarity-messages")), "the empty-text message")
    check(focused(driver).get_attribute("id") == first.get_attribute("id"), "the cursor goes to the empty sentence")
    print(f"    message: {messages(driver, 'similarity-messages')[0]}")

    box = driver.find_element(By.ID, "source-text")
    driver.execute_script("arguments[0].focus()", box)
    chord(driver, Keys.CONTROL, "a")
    press(driver, Keys.DELETE)
    box.send_keys("a dog runs . " * 160)  # 2,080 characters: over the 2,000 limit
    chord(driver, Keys.CONTROL, Keys.ENTER)  # the textarea's shortcut for Translate
    wait(driver, lambda d: any("at most 2000" in m for m in messages(d, "translate-messages")), "the too-long message")
    found = messages(driver, "translate-messages")
    check(any("body.texts.0" in m for m in found), f"the message names the field: {found[0]}")
    wait(driver, lambda d: any("at most 2000" in m for m in messages(d, "bridge-messages")), "the attention error")
    check("over" in driver.find_element(By.ID, "source-count").get_attribute("class"), "the counter turns red")
    screenshot(driver, driver.find_element(By.ID, "translate"), shots / "error.png")

    errors = console_errors(driver)
    check(not errors, f"no browser errors besides the expected 422s: {errors}")


def check_transformer_model(driver: WebDriver, base: str, sentence: str, shots: Path) -> None:
    """`sentence` is English, the language the page preselects."""
    driver.get(base + "/")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#layer option"), "the layer select")
    layer = driver.find_element(By.ID, "layer")
    check(layer.is_displayed() and layer.get_attribute("value") == "2", "a layer select, on the last layer")
    check(driver.find_element(By.ID, "source-lang").get_attribute("value") == "en",
          "English is the preselected source language")
    box = driver.find_element(By.ID, "source-text")
    box.clear()
    box.send_keys(sentence, Keys.CONTROL, Keys.ENTER)
    wait(driver, translations_done, "the translations")
    maps = wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#self-attention-maps table"), "the layer's maps")
    check(len(maps) == 4, "one self-attention map per head (4)")
    n = len(maps[0].find_elements(By.CSS_SELECTOR, "tbody tr"))
    check(n >= 5 and len(maps[0].find_elements(By.CSS_SELECTOR, "td.cell")) == n * n, f"each map {n} x {n}")
    titles = driver.execute_script(  # one round trip for every cell's title
        "return [...arguments[0].querySelectorAll('tbody tr')].map(r => [...r.querySelectorAll('td.cell')]"
        ".map(c => c.title))", maps[0])
    sums = [sum(float(t.rsplit(":", 1)[1]) for t in row) for row in titles]
    check(all(abs(total - 1) < 0.05 for total in sums), "each subword's attention sums to 1")
    check(not driver.find_elements(By.ID, "bridge-heatmap"), "no bridge map without a bridge")
    caption = driver.find_element(By.CSS_SELECTOR, "#self-attention-maps caption").text
    driver.execute_script("arguments[0].focus()", layer)
    press(driver, Keys.UP)  # a focused select steps to the option above: layer 1
    wait(driver, lambda d: "layer 1 of 2" in d.find_element(By.CSS_SELECTOR, "#heatmaps h3").text, "layer 1's maps")
    check(caption != driver.find_element(By.CSS_SELECTOR, "#self-attention-maps caption").text,
          "choosing layer 1 redraws the maps")
    screenshot(driver, driver.find_element(By.ID, "bridge"), shots / "self-attention.png")
    errors = console_errors(driver)
    check(not errors, f"no browser errors: {errors}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=str(REPO / "runs" / "browser-test"),
                        help="where the models are trained, kept and reused (default: runs/browser-test)")
    parser.add_argument("--screenshots", default=str(REPO / "docs" / "screenshots"))
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    parser.add_argument("--steps", type=int, default=1500, help="training steps of each tiny model")
    args = parser.parse_args(argv)
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    shots = Path(args.screenshots).resolve()

    models = {kind: trained_model(work, kind, args.steps) for kind in MODELS}
    sentence = training_sentence(work, "de", 3)
    english = training_sentence(work, "en", 3)  # its translation
    other = training_sentence(work, "en", 40)  # an unrelated sentence to compare with
    profile = Path(tempfile.mkdtemp(prefix="chromium-profile-"))
    driver = browser(args.chromium, args.chromedriver, profile)
    try:
        print(f"== {driver.capabilities.get('browserName')} {driver.capabilities.get('browserVersion')}, headless")
        with served(models["bridge"], work / "serve-bridge.log") as base:
            print(f"== the attention-bridge model at {base}/  (sentence: {sentence!r})")
            check_bridge_model(driver, base, sentence, other, shots)
        with served(models["transformer"], work / "serve-transformer.log") as base:
            print(f"== the Transformer model (no bridge) at {base}/")
            check_transformer_model(driver, base, english, shots)
    except CheckFailed as failure:
        print(f"FAILED: {failure}", file=sys.stderr)
        return 1
    finally:
        driver.quit()
    print("== all browser checks passed; both servers stopped with exit code 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
