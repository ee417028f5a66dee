"""The web console (sqlengine/server/static/), driven in headless Chromium through Selenium.

The server runs with a token on a free port in a thread (as in test_server.py); the pipeline runs with lazy Spark
(no JVM).  Screenshots go to test-artifacts/console/ at the repo root.  Skipped only when Chromium or
chromedriver is not installed (./run.sh test installs them with apt-get when it can).
"""
from __future__ import annotations

import json
import os
import shutil
import time

import pytest

pytestmark = pytest.mark.slow   # a long real-system or Spark test: ./run.sh test -m "not slow" skips it

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

from sqlengine.server import create_app  # noqa: E402
from tests.server.test_server import Served  # noqa: E402

TOKEN = "console-token-42"
AUTH = {"authorization": f"Bearer {TOKEN}"}
LAZY = {"spark_conf": {"sqlengine.spark.start": "lazy"}}
SQL = """CREATE TABLE t (k INT NOT NULL, v INT, name VARCHAR);
CREATE MATERIALIZED VIEW agg AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k;
CREATE MATERIALIZED VIEW parsed AS SELECT k, CAST(name AS INT) AS num FROM t;
CREATE TABLE ticks (id INT NOT NULL) WITH ('connectors' = '[{"name": "gen", "transport": {"name": "datagen",
  "config": {"count": 50, "seed": 1, "columns": {"id": {"sequence": {"start": 1}}}}}}]');
"""
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHOTS = os.path.join(ROOT, "test-artifacts", "console")


def find_browser():
    """(chromium binary, chromedriver) or None."""
    browser = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)),
                   None)
    driver = shutil.which("chromedriver") or (os.path.exists("/usr/bin/chromedriver") and "/usr/bin/chromedriver")
    return (browser, driver) if browser and driver else None


def test_assets_without_token(tmp_path):
    """The page and its assets load without a token (CSP: local scripts only); the API still needs one."""
    s = Served(create_app(str(tmp_path / "root"), token=TOKEN))
    try:
        for path, kind in (("/", "text/html"), ("/console/", "text/html"), ("/console/console.js", "javascript"),
                           ("/console/console.css", "text/css")):
            r = httpx.get(s.url + path)
            assert r.status_code == 200 and kind in r.headers["content-type"], (path, r.status_code)
            assert "script-src 'self'" in r.headers["content-security-policy"]
        assert "https://" not in httpx.get(s.url + "/").text   # nothing from a CDN
        assert httpx.head(s.url + "/console/console.js").status_code == 200
        for path in ("/console/nope.js", "/console/..%2Fapp.py", "/v0/pipelines", "/openapi.json"):
            assert httpx.get(s.url + path).status_code in (401, 404), path
        assert httpx.post(s.url + "/console/").status_code == 401
    finally:
        s.stop()


@pytest.fixture(scope="module")
def browser():
    found = find_browser()
    if found is None:
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver; "
                    "./run.sh test installs them when run as root)")
    from selenium import webdriver   # the test extra's (a missing selenium fails, it does not skip)
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = found[0]
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1400"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(executable_path=found[1]), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def test_console_in_browser(browser, tmp_path):
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    os.makedirs(SHOTS, exist_ok=True)
    d = browser
    wait = WebDriverWait(d, 15, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException))
    text = lambda id_: d.find_element(By.ID, id_).text  # noqa: E731

    def shot(name):
        assert d.save_screenshot(os.path.join(SHOTS, name + ".png"))

    def wait_text(id_, expected):
        wait.until(lambda _: text(id_) == expected, f"#{id_} never became {expected!r} (is {text(id_)!r})")

    s = Served(create_app(str(tmp_path / "root"), token=TOKEN))
    try:
        with httpx.Client(base_url=s.url, headers=AUTH, timeout=60) as http:
            r = http.put("/v0/pipelines/shop", json={"program_code": SQL, "runtime_config": LAZY})
            assert r.status_code == 201, r.text
            assert http.post("/v0/pipelines/shop/start").json()["status"] == "running"
            r = http.post("/v0/pipelines/shop/ingress/t", content=json.dumps(
                [{"k": 1, "v": 10, "name": "7"}, {"k": 2, "v": 20, "name": "abc"}, {"k": 1, "v": 5, "name": "8"}]))
            assert r.status_code == 200, r.text
            http.post("/v0/pipelines/shop/wait_for_idle")

            # 1. the page asks for the token (the API answered 401), then lists the pipeline
            d.get(s.url + "/")
            wait.until(EC.visibility_of_element_located((By.ID, "token-input")))
            assert "401" in text("auth-message") and "token" in text("auth-message").lower()
            shot("01-token-prompt")
            d.find_element(By.ID, "token-input").send_keys("wrong-token", Keys.ENTER)
            wait.until(lambda _: "rejected" in text("auth-message"), "a wrong token shows no message")
            d.find_element(By.ID, "token-input").send_keys(TOKEN, Keys.ENTER)
            wait.until(EC.invisibility_of_element_located((By.ID, "auth")))
            cell = lambda sel: d.find_element(By.CSS_SELECTOR, "#pipeline-row-shop " + sel)  # noqa: E731
            wait.until(lambda _: cell(".state").text == "running")
            wait.until(lambda _: cell(".step").text not in ("", "-"))
            shot("02-pipelines")

            # 2. the pipeline page: program, counters, connectors, errors
            wait.until(lambda _: cell("a").click() or True)   # (retried if a refresh replaced the row)
            wait.until(EC.visibility_of_element_located((By.ID, "pipeline-view")))
            wait.until(lambda _: "CREATE MATERIALIZED VIEW agg" in text("program-code"))
            wait_text("pipeline-state", "running")
            wait_text("rows-in-t", "3")
            wait_text("error-counts", "parsed: 1")
            wait.until(lambda _: "abc" in text("error-rows"), "the error row is not listed")
            assert "CAST(name AS INT)" in text("error-rows")
            assert d.find_element(By.ID, "btn-pause").is_enabled() and not d.find_element(By.ID, "btn-resume").is_enabled()
            wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#connectors tbody tr")))
            wait.until(lambda _: "ticks.gen source datagen finished 50" in text("connectors"), "no connector row")
            wait_text("rows-in-ticks", "50")

            # 3. an ad-hoc query (Ctrl-Enter) and its result table
            box = d.find_element(By.ID, "query-sql")
            box.clear()
            box.send_keys("SELECT k, n, s FROM agg ORDER BY k")
            box.send_keys(Keys.CONTROL, Keys.ENTER)
            wait.until(lambda _: text("query-status").startswith("2 rows"))
            heads = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#query-result thead th .colname")]
            cells = [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
                     for r in d.find_elements(By.CSS_SELECTOR, "#query-result tbody tr")]
            assert heads == ["k", "n", "s"] and cells == [["1", "2", "15"], ["2", "1", "20"]], (heads, cells)
            shot("03-query")

            # 4. rows pushed through the ingress API show up in the counters
            before = text("rows-out-agg")
            r = http.post("/v0/pipelines/shop/ingress/t", content=json.dumps(
                [{"k": 3, "v": 1, "name": "1"}, {"k": 4, "v": 2, "name": "2"}]))
            assert r.status_code == 200, r.text
            wait_text("rows-in-t", "5")
            wait.until(lambda _: text("rows-out-agg") != before, "the view's row count did not change")
            wait.until(lambda _: len(d.find_elements(By.CSS_SELECTOR, "#chart-throughput polyline")) == 1)
            shot("04-live")

            # 5. pause and resume with the buttons
            d.find_element(By.ID, "btn-pause").click()
            wait_text("pipeline-state", "paused")
            assert http.get("/v0/pipelines/shop").json()["status"] == "paused"
            wait.until(lambda _: d.find_element(By.ID, "btn-resume").is_enabled())
            shot("05-paused")
            d.find_element(By.ID, "btn-resume").click()
            wait_text("pipeline-state", "running")
            assert http.get("/v0/pipelines/shop").json()["status"] == "running"

            # 6. a bad query shows its error with line and column (and clears the result table)
            box.clear()
            box.send_keys("SELECT k\nFROM agg WHERE")
            d.find_element(By.ID, "query-run").click()
            wait.until(EC.visibility_of_element_located((By.ID, "query-error")))
            err = text("query-error")
            assert "ParseError" in err and "line 2, column" in err, err
            assert d.find_elements(By.CSS_SELECTOR, "#query-result tbody tr") == []
            box.clear()
            box.send_keys("SELECT nope FROM agg")
            d.find_element(By.ID, "query-run").click()
            wait.until(lambda _: "nope" in text("query-error"))
            shot("06-query-error")

            # 7. stop: the state follows, and start brings it back
            d.find_element(By.ID, "btn-stop").click()
            wait_text("pipeline-state", "stopped")
            d.find_element(By.ID, "btn-start").click()
            wait_text("pipeline-state", "running")
            logs = [e for e in d.get_log("browser") if e.get("level") == "SEVERE" and "401" not in e["message"]
                    and "400" not in e["message"]]
            assert not logs, logs   # no script errors (401/400 are the expected failed requests)
    finally:
        s.stop()


NESTED_SQL = """CREATE TABLE n (id INT NOT NULL, xs INT[], m MAP(VARCHAR, INT), mi MAP(INT, VARCHAR[]),
  s STRUCT(name VARCHAR, nums INT[]), doc JSON, big INT[]);
CREATE MATERIALIZED VIEW nv AS SELECT * FROM n;
"""
CELLS_JS = """return [...document.querySelectorAll(arguments[0] + ' tbody tr')].map(
  (r) => [...r.cells].map((c) => [c.textContent, c.querySelectorAll('.v-null').length, c.title]))"""


def test_nested_values_in_browser(browser, tmp_path):
    """Nested values in the change feed (egress: types from the view's columns) and in a query result (types
    from the x-columns header): ARRAY as [..], MAP as {k → v}, ROW as {name: v}, JSON as compact JSON, strings
    quoted inside, NULL marked at any depth, a long value cut with the whole in its title and on a click."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser
    wait = WebDriverWait(d, 15)
    text = lambda id_: d.find_element(By.ID, id_).text  # noqa: E731
    s = Served(create_app(str(tmp_path / "root")))   # no token
    try:
        with httpx.Client(base_url=s.url, timeout=60) as http:
            r = http.put("/v0/pipelines/nest", json={"program_code": NESTED_SQL, "runtime_config": LAZY})
            assert r.status_code == 201, r.text
            assert http.post("/v0/pipelines/nest/start").json()["status"] == "running"
            d.get(s.url + "/#/pipelines/nest")
            wait.until(lambda _: d.find_elements(By.CSS_SELECTOR, "#feed-view option"))
            d.find_element(By.ID, "feed-toggle").click()
            wait.until(lambda _: text("feed-status") == "watching nv: no changes yet", "the change feed did not start")
            rows = [{"id": 1, "xs": [1, None, 3], "m": {"a": 1, "b c": None}, "mi": [[7, ["x", None]]],
                     "s": {"name": "it's", "nums": [1, 2]}, "doc": {"k": [1, {"n": None}]}, "big": list(range(100))},
                    {"id": 2},
                    {"id": 3, "xs": [], "m": {}, "s": {"name": None, "nums": None}, "doc": "x"}]   # (an INT-keyed
            # MAP comes in as pairs: ingress reads no integer from a JSON object's text keys)
            r = http.post("/v0/pipelines/nest/ingress/n", content=json.dumps(rows))
            assert r.status_code == 200, r.text
            wait.until(lambda _: text("feed-status") == "watching nv: 3 changes", text("feed-status"))
            big = "[" + ", ".join(map(str, range(100))) + "]"
            cut = big[:160] + "…"
            row1 = ["[1, NULL, 3]", "{'a' → 1, 'b c' → NULL}", "{7 → ['x', NULL]}",
                    "{name: 'it''s', nums: [1, 2]}"]
            feed = d.execute_script(CELLS_JS, "#feed-rows")
            got = {c[2][0]: c for c in feed}   # by id
            assert [c[0] for c in got["1"][1:]] == ["+ insert", "1", *row1, '{"k":[1,{"n":null}]}', cut], got["1"]
            assert [c[1] for c in got["1"][3:6]] == [1, 1, 1]   # the NULL inside: marked
            assert got["1"][-1][2].startswith(big) and "click" in got["1"][-1][2]   # the whole value in the title
            assert [c[0] for c in got["2"][2:]] == ["2"] + ["NULL"] * 6, got["2"]
            assert [c[0] for c in got["3"][2:]] == ["3", "[]", "{}", "NULL", "{name: NULL, nums: NULL}", '"x"',
                                                     "NULL"], got["3"]
            heads = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#feed-rows thead th .coltype")]
            assert heads == ["INT", "INT[]", "MAP(VARCHAR, INT)", "MAP(INT, VARCHAR[])",
                             "STRUCT(name VARCHAR, nums INT[])", "JSON", "INT[]"], heads

            # a query: the same values (a JSON value is its text there: DuckDB's VARCHAR)
            box = d.find_element(By.ID, "query-sql")
            box.clear()
            box.send_keys("SELECT * FROM nv ORDER BY id")
            d.find_element(By.ID, "query-run").click()
            wait.until(lambda _: text("query-status").startswith("3 rows"))
            q = d.execute_script(CELLS_JS, "#query-result")
            assert [c[0] for c in q[0]] == ["1", *row1, '{"k":[1,{"n":null}]}', cut], q[0]
            assert [c[0] for c in q[2]] == ["3", "[]", "{}", "NULL", "{name: NULL, nums: NULL}", '"x"', "NULL"], q[2]
            heads = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#query-result thead th .coltype")]
            assert heads[:6] == ["INT", "INT[]", "MAP(VARCHAR, INT)", "MAP(INT, VARCHAR[])",
                                 "STRUCT(name VARCHAR, nums INT[])", "VARCHAR"], heads
            long = d.find_element(By.CSS_SELECTOR, "#query-result tbody tr:first-child td:last-child")
            long.click()   # expands, and a second click cuts again
            wait.until(lambda _: long.get_attribute("textContent") == big)
            long.click()
            wait.until(lambda _: long.get_attribute("textContent") == cut)
            os.makedirs(SHOTS, exist_ok=True)
            assert d.save_screenshot(os.path.join(SHOTS, "07-nested.png"))
            d.find_element(By.ID, "feed-toggle").click()
            wait.until(lambda _: text("feed-status") == "stopped")
            logs = [e for e in d.get_log("browser") if e.get("level") == "SEVERE" and "favicon" not in e["message"]
                    and (e.get("source") != "network" or s.url in e["message"])]   # (not the last test's page)
            assert not logs, logs
    finally:
        # (an open change stream would hold the server's stop up; leaving the page alone does not close it)
        d.execute_script("if (typeof stopFeed === 'function') stopFeed()")
        s.stop()
