"""The Schedulearn sidebar in real Chromium against a real `jupyter lab` with the server extension:
GPUs shown, a real job followed queued → running → succeeded, policy switched both ways, a running
job cancelled from the panel, log view, palette commands, and the message when the extension is off.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import LabServer, browser_requirements, open_lab

pytestmark = pytest.mark.slow

PANEL = "#schedulearn-sidebar"
PLUGIN = "schedulearn-labextension:plugin"
SLEEP_JOB = "import time; time.sleep({s}); print('hi')"
#: a job that runs until the test creates `gate` (a window the page cannot miss on a loaded machine)
GATED_JOB = ("import os, sys, time\nwhile not os.path.exists({gate!r}):\n    time.sleep(0.05)\nprint('hi')\n"
             "for i in range(50):\n    sys.stdout.write(f'\\rtraining {{i + 1}}/50')\nprint()\nprint('bye')")


def open_sidebar(page: Any) -> Any:
    """Clicks the sidebar's tab, unless the restored layout already shows the panel."""
    panel = page.locator(PANEL)
    if not panel.is_visible():
        page.click('.jp-SideBar .lm-TabBar-tab[data-id="schedulearn-sidebar"]')
    panel.wait_for(state="visible")
    return panel


def row(page: Any, job_id: int) -> Any:
    return page.locator(f'{PANEL} tr.jp-schedulearn-job[data-job-id="{job_id}"]')


def submit(server: LabServer, name: str, seconds: float, gpus: int = 1) -> int:
    status, job = server.api("POST", "jobs", {"name": name, "script": SLEEP_JOB.format(s=seconds),
                                              "gpus": gpus})
    assert status == 201, job
    return job["id"]


def record_states(page: Any, job_id: int) -> None:
    """Records every state the panel shows for `job_id` (window.__states[job_id])."""
    page.evaluate(
        """(id) => {
            window.__states = window.__states || {};
            const seen = window.__states[id] = [];
            const panel = document.querySelector('#schedulearn-sidebar');
            const look = () => {
                const tr = panel.querySelector(`tr.jp-schedulearn-job[data-job-id="${id}"]`);
                const s = tr && tr.dataset.state;
                if (s && seen[seen.length - 1] !== s) seen.push(s);
            };
            look();
            new MutationObserver(look).observe(panel, {subtree: true, childList: true, attributes: true});
        }""",
        job_id,
    )


def wait_until(predicate: Any, timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_sidebar_shows_the_virtual_gpus(lab_page: Any, lab_server: LabServer, shot: Any) -> None:
    panel = open_sidebar(lab_page)
    cards = panel.locator(".jp-schedulearn-gpu")
    cards.first.wait_for()
    _, gpus = lab_server.api("GET", "gpus")
    expected = [(n["name"], g["index"]) for n in gpus["nodes"] for g in n["gpus"]]
    assert len(expected) == 4
    shown = [(c.get_attribute("data-node"), int(c.get_attribute("data-index"))) for c in cards.all()]
    assert shown == expected
    assert panel.locator(".jp-schedulearn-node .jp-schedulearn-badge", has_text="virtual").count() == 1
    assert panel.locator(".jp-schedulearn-banner").is_hidden()
    _, policy = lab_server.api("GET", "policy")
    assert panel.locator("select.jp-schedulearn-policy").input_value() == policy["policy"]
    shot(lab_page, "sidebar-gpus", panel)


def test_job_goes_queued_running_succeeded_in_the_panel(lab_page: Any, lab_server: LabServer,
                                                         shot: Any, tmp_path: Path) -> None:
    panel = open_sidebar(lab_page)
    panel.locator(".jp-schedulearn-gpu").first.wait_for()
    blocker = submit(lab_server, "blocker", 300, gpus=4)  # holds every GPU: the next job must queue
    lab_server.wait_job(blocker, {"running"})
    gate = tmp_path / "gate"
    status, body = lab_server.api("POST", "jobs", {"name": "t", "script": GATED_JOB.format(gate=str(gate)),
                                                   "gpus": 1})
    assert status == 201, body
    job = body["id"]
    record_states(lab_page, job)
    # Free the GPUs only once the panel has shown the job queued (a loaded machine must not
    # let the blocker end before the page starts recording).
    row(lab_page, job).and_(lab_page.locator('[data-state="queued"]')).wait_for(timeout=60_000)
    assert lab_server.api("DELETE", f"jobs/{blocker}")[0] == 200
    # While it runs, the GPU grid names it on the GPU it holds.
    lab_page.locator(f'{PANEL} .jp-schedulearn-gpu[data-job-id="{job}"]').wait_for(timeout=60_000)
    gate.touch()  # (it runs until the grid has shown it)
    row(lab_page, job).and_(lab_page.locator('[data-state="succeeded"]')).wait_for(timeout=60_000)
    states = lab_page.evaluate("(id) => window.__states[id]", job)
    assert states == ["queued", "running", "succeeded"], states
    assert lab_server.api("GET", f"jobs/{job}")[1]["state"] == "succeeded"
    # The timeline has a bar for the job on the GPU it used.
    bar = panel.locator(f'.jp-schedulearn-bar[data-job-id="{job}"]')
    bar.first.wait_for()
    assert bar.first.get_attribute("data-row").startswith(gpu_row_prefix(lab_server))
    # Logs: the log view follows the job and shows its output.
    row(lab_page, job).locator("button.jp-schedulearn-logs").click()
    log = lab_page.locator(f"#schedulearn-log-{job} pre.jp-schedulearn-log")
    log.wait_for()
    lab_page.wait_for_function(
        "(id) => document.querySelector(`#schedulearn-log-${id} pre`)?.textContent.includes('bye')", arg=job)
    shown = log.text_content()  # a progress bar at its last drawing, as a terminal shows it
    assert "hi\ntraining 50/50\nbye" in shown and "training 49/50" not in shown and "\r" not in shown
    status = lab_page.locator(f"#schedulearn-log-{job} .jp-schedulearn-logview-status")
    lab_page.wait_for_function(
        "(id) => document.querySelector(`#schedulearn-log-${id} .jp-schedulearn-logview-status`)"
        "?.dataset.state === 'succeeded'", arg=job)
    assert "succeeded" in status.inner_text()
    shot(lab_page, "job-log")


def test_long_names_wrap_and_finished_auto_jobs_show_the_gpus_they_got(lab_page: Any,
                                                                        lab_server: LabServer) -> None:
    """At the default sidebar width a long job name and its details are shown in full (wrapped,
    not cut off), and a finished `--gpus auto` job shows how many GPUs it ran on, not "auto"."""
    open_sidebar(lab_page)
    name = "resnet50-imagenet-baseline-lr0.1-bs256-warmup5-seed42-final"
    status, job = lab_server.api("POST", "jobs", {"name": name, "script": SLEEP_JOB.format(s=0.5),
                                                  "gpus": "auto", "min_gpus": 2, "max_gpus": 2})
    assert status == 201, job
    done = lab_server.wait_job(job["id"], {"succeeded"})
    held = sum(len(v) for v in done["last_alloc"].values())
    assert held == 2, done
    r = row(lab_page, job["id"])
    r.and_(lab_page.locator('[data-state="succeeded"]')).wait_for(timeout=60_000)
    for part in (".jp-schedulearn-job-title", ".jp-schedulearn-job-meta"):
        el = r.locator(part)
        clipped = el.evaluate("e => e.scrollWidth > e.clientWidth + 1")
        assert not clipped, f"{part} is cut off: {el.inner_text()!r}"
    assert name in r.locator(".jp-schedulearn-job-title").inner_text()
    meta = r.locator(".jp-schedulearn-job-meta").inner_text()
    assert "2 GPUs" in meta and "auto" not in meta, meta


CONTRAST_JS = """(panel) => {
    const rgba = (c) => {
        const v = c.match(/rgba?\\(([^)]+)\\)/)[1].split(/[ ,\\/]+/).map(Number);
        return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
    };
    const over = (top, bottom) => [0, 1, 2].map(i => top[i] * top[3] + bottom[i] * (1 - top[3])).concat([1]);
    const background = (el) => {
        const layers = [];
        for (let e = el; e; e = e.parentElement) {
            const c = rgba(getComputedStyle(e).backgroundColor);
            if (c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
        }
        return layers.reverse().reduce((acc, c) => over(c, acc), [255, 255, 255, 1]);
    };
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    const lum = (c) => 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
    const box = document.createElement('div');
    const samples = ['queued', 'running', 'succeeded', 'failed', 'cancelled'].map(s =>
        `<span class="jp-schedulearn-state jp-mod-${s}">${s}</span>`).concat([
        '<span class="jp-schedulearn-badge">virtual</span>',
        '<span class="jp-schedulearn-badge jp-mod-error">error</span>',
        '<div class="jp-schedulearn-banner jp-mod-missing">missing</div>',
        '<div class="jp-schedulearn-banner jp-mod-unreachable">unreachable</div>']);
    box.innerHTML = samples.join('');
    panel.appendChild(box);
    const out = {};
    for (const el of box.children) {
        const bg = background(el);
        const fg = over(rgba(getComputedStyle(el).color), bg);
        const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
        out[el.className] = (a + 0.05) / (b + 0.05);
    }
    box.remove();
    return out;
}"""


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_badges_and_banners_are_readable_in_both_themes(lab_page: Any, theme: str) -> None:
    """Badge and banner text against its rendered background: contrast >= 4.5:1 (WCAG AA). The
    theme is saved in the server's settings: the light one is put back for the tests after."""
    panel = open_sidebar(lab_page)
    try:
        change_theme(lab_page, theme)
        ratios = panel.evaluate(CONTRAST_JS)
        assert len(ratios) == 9, ratios
        low = {k: round(v, 2) for k, v in ratios.items() if v < 4.5}
        assert not low, f"{theme}: contrast below 4.5:1: {low}"
    finally:
        change_theme(lab_page, "JupyterLab Light")


def change_theme(page: Any, theme: str) -> None:
    page.evaluate("(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", theme)
    page.wait_for_function("(t) => document.body.dataset.jpThemeName === t", arg=theme, timeout=30_000)
    page.wait_for_timeout(500)  # the theme's stylesheet applied


def gpu_row_prefix(server: LabServer) -> str:
    _, gpus = server.api("GET", "gpus")
    return gpus["nodes"][0]["name"] + ":"


def test_policy_switched_from_the_panel_and_followed_from_elsewhere(lab_page: Any,
                                                                    lab_server: LabServer) -> None:
    panel = open_sidebar(lab_page)
    select = panel.locator("select.jp-schedulearn-policy")
    _, current = lab_server.api("GET", "policy")
    _, policies = lab_server.api("GET", "policies")
    names = [p["name"] for p in policies]
    assert len(names) >= 2, names
    wait_until(lambda: select.input_value() == current["policy"], what="the panel's policy")
    options = [o.get_attribute("value") for o in select.locator("option").all()]
    assert options == names
    # a real dropdown: JupyterLab's select with its caret, not a bare box
    assert panel.locator(".jp-schedulearn-policy-box svg").first.is_visible()
    target = next(n for n in names if n != current["policy"])
    # A switch for everyone asks first; "Keep" leaves the policy as it was.
    select.select_option(target)
    dialog = lab_page.locator(".jp-Dialog")
    dialog.wait_for()
    assert f"Switch the scheduling policy to {target}?" in dialog.inner_text()
    dialog.locator("button.jp-mod-reject").click()
    dialog.wait_for(state="detached")
    wait_until(lambda: select.input_value() == current["policy"], what="the dropdown to go back")
    assert lab_server.api("GET", "policy")[1]["policy"] == current["policy"]
    select.select_option(target)
    lab_page.locator(".jp-Dialog button.jp-mod-accept").click()
    wait_until(lambda: lab_server.api("GET", "policy")[1]["policy"] == target, what=f"policy {target}")
    # Changed elsewhere (REST): the panel follows.
    other = next(n for n in names if n != target)
    status, body = lab_server.api("PUT", "policy", {"policy": other})
    assert status == 200, body
    wait_until(lambda: select.input_value() == other, what=f"the panel to show {other}")
    assert select.get_attribute("data-policy") == other


def test_cancel_a_running_job_from_the_panel(lab_page: Any, lab_server: LabServer) -> None:
    open_sidebar(lab_page)
    job = submit(lab_server, "long", 120)
    lab_server.wait_job(job, {"running"})
    r = row(lab_page, job)
    r.and_(lab_page.locator('[data-state="running"]')).wait_for(timeout=30_000)
    r.locator("button.jp-schedulearn-cancel").click()
    dialog = lab_page.locator(".jp-Dialog")
    dialog.wait_for()
    assert f"#{job}" in dialog.inner_text()
    dialog.locator("button.jp-mod-accept").click()
    done = lab_server.wait_job(job, {"cancelled", "failed", "succeeded"}, timeout=30)
    assert done["state"] == "cancelled", done
    r.and_(lab_page.locator('[data-state="cancelled"]')).wait_for(timeout=30_000)
    assert r.locator("button.jp-schedulearn-cancel").count() == 0


def test_keep_it_leaves_the_job_running(lab_page: Any, lab_server: LabServer) -> None:
    open_sidebar(lab_page)
    job = submit(lab_server, "kept", 120)
    lab_server.wait_job(job, {"running"})
    r = row(lab_page, job)
    r.and_(lab_page.locator('[data-state="running"]')).wait_for(timeout=30_000)
    r.locator("button.jp-schedulearn-cancel").click()
    lab_page.locator(".jp-Dialog button", has_text="Keep it").click()
    time.sleep(1.0)
    assert lab_server.api("GET", f"jobs/{job}")[1]["state"] == "running"
    assert lab_server.api("DELETE", f"jobs/{job}")[0] == 200


def test_commands_are_registered_and_work(lab_page: Any, lab_server: LabServer) -> None:
    commands = lab_page.evaluate(
        "() => window.jupyterapp.commands.listCommands().filter(c => c.startsWith('schedulearn:'))")
    assert set(commands) >= {"schedulearn:open", "schedulearn:refresh", "schedulearn:set-policy",
                             "schedulearn:cancel-job", "schedulearn:show-logs"}
    _, policies = lab_server.api("GET", "policies")
    _, current = lab_server.api("GET", "policy")
    target = next(p["name"] for p in policies if p["name"] != current["policy"])
    lab_page.evaluate(
        "(p) => window.jupyterapp.commands.execute('schedulearn:set-policy', {policy: p})", target)
    assert lab_server.api("GET", "policy")[1]["policy"] == target
    labels = lab_page.evaluate(
        "(ids) => ids.map(id => window.jupyterapp.commands.label(id))", sorted(commands))
    assert all(label.startswith("Schedulearn: ") for label in labels), labels
    lab_page.evaluate("() => window.jupyterapp.commands.execute('schedulearn:open')")
    lab_page.locator(PANEL).wait_for(state="visible")
    job = submit(lab_server, "cmd", 0)
    lab_server.wait_job(job, {"succeeded"})
    lab_page.evaluate("(id) => window.jupyterapp.commands.execute('schedulearn:show-logs', {id})", job)
    lab_page.locator(f"#schedulearn-log-{job} pre.jp-schedulearn-log", has_text="hi").wait_for()


def test_settings_schema_refuses_bad_values(lab_server: LabServer) -> None:
    assert lab_server.put_settings(PLUGIN, {"timelineHours": -1}) == 400
    assert lab_server.put_settings(PLUGIN, {"refreshInterval": "often"}) == 400
    assert lab_server.put_settings(PLUGIN, {"nope": 1}) == 400


#: a training job for the docs picture: reports its progress (a bar and the time left) for 2 minutes
REPORTING_JOB = ("import time\nfrom schedulearn import elastic\nfor i in range(1, 121):\n"
                 "    time.sleep(1)\n    elastic.report(progress=i / 120)\n")


def test_sidebar_screenshot_for_the_docs(browser: Any, lab_server: LabServer, shot: Any) -> None:
    """A busy scheduler for the README picture, under the deadline-aware `qoe` policy: a job
    with a deadline and an `auto` job that report their progress (a bar, the time left, the GPUs
    given), a queued one, finished ones; the timeline span comes from the settings (saved
    through JupyterLab's settings API)."""
    assert lab_server.put_settings(PLUGIN, {"timelineHours": 0.1, "refreshInterval": 2}) == 204
    assert lab_server.api("PUT", "policy", {"policy": "qoe"})[0] == 200
    lab_page = open_lab(browser, lab_server)
    panel = open_sidebar(lab_page)
    # auto window: as long as the jobs need, at most the 6 minutes the setting allows
    panel.locator(".jp-schedulearn-timeline-section h3", has_text=re.compile(r"last [1-6] min\)")).wait_for()
    widen_left_area(lab_page, 420)
    running = []
    for spec in ({"name": "resnet50", "gpus": 2, "deadline": "45m"}, {"name": "bert-base", "gpus": "auto"}):
        status, job = lab_server.api("POST", "jobs", {**spec, "script": REPORTING_JOB})
        assert status == 201, job
        running.append(job["id"])
    queued = submit(lab_server, "gpt-small", 120, gpus=2)
    for j in running:
        lab_server.wait_job(j, {"running"})
    row(lab_page, queued).wait_for()
    lab_page.locator(f'{PANEL} .jp-schedulearn-gpu[data-job-id="{running[0]}"]').first.wait_for()
    for j in running:  # progress, the time left, and (resnet50) the deadline on track
        row(lab_page, j).locator(".jp-schedulearn-progress").wait_for(timeout=60_000)
    meta = row(lab_page, running[0]).locator(".jp-schedulearn-job-meta").inner_text()
    assert "done" in meta and "left" in meta, meta
    row(lab_page, running[0]).get_by_text(re.compile(r"due in \d+m .*on track")).wait_for(timeout=60_000)
    lab_page.locator(f'{PANEL} .jp-schedulearn-bar[data-job-id="{running[1]}"]').wait_for()
    time.sleep(3)  # a few seconds of running bars on the timeline
    shot(lab_page, "sidebar", panel)
    shot(lab_page, "jupyterlab-with-sidebar")
    for j in [*running, queued]:
        lab_server.api("DELETE", f"jobs/{j}")
    lab_page.context.close()
    assert lab_server.put_settings(PLUGIN, {}) == 204
    assert lab_server.api("PUT", "policy", {"policy": "fifo"})[0] == 200


def widen_left_area(page: Any, width: int) -> None:
    """Drags the handle between the left sidebar and the main area to make the sidebar `width` px."""
    box = page.locator(PANEL).bounding_box()
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
    hb = handle.bounding_box()
    y = hb["y"] + hb["height"] / 2
    page.mouse.move(hb["x"] + hb["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(hb["x"] + hb["width"] / 2 + (width - box["width"]), y, steps=5)
    page.mouse.up()


def test_message_when_the_server_extension_is_missing(browser: Any, tmp_path: Any,
                                                      lab_traits: dict, shot: Any) -> None:
    browser_requirements()
    server = LabServer(tmp_path / "lab-off", lab_traits, enable_schedulearn=False).start()
    try:
        page = open_lab(browser, server)
        panel = open_sidebar(page)
        banner = panel.locator(".jp-schedulearn-banner.jp-mod-missing")
        banner.wait_for(timeout=30_000)
        assert "server extension is not enabled" in banner.inner_text()
        assert panel.locator(".jp-schedulearn-gpus-section").is_hidden()  # only the message
        shot(page, "sidebar-extension-missing", panel)
        page.context.close()
    finally:
        server.stop()


def test_message_when_the_server_is_unreachable(browser: Any, tmp_path: Any, lab_traits: dict) -> None:
    browser_requirements()
    own = {**lab_traits, "job_root": str(tmp_path / "jobs"),  # its own store: one scheduler per store
           "store_url": f"sqlite:///{tmp_path / 'jobs.db'}"}
    server = LabServer(tmp_path / "lab-gone", own).start()
    try:
        page = open_lab(browser, server)
        panel = open_sidebar(page)
        panel.locator(".jp-schedulearn-gpu").first.wait_for()
        assert panel.locator(".jp-schedulearn-banner").is_hidden()
        server.stop()
        banner = panel.locator(".jp-schedulearn-banner.jp-mod-unreachable")
        banner.wait_for(timeout=30_000)
        assert "Cannot reach the Jupyter server" in banner.inner_text()
        # The last known state stays on screen, marked stale.
        assert panel.locator(".jp-schedulearn-gpu").count() == 4
        assert "jp-mod-stale" in (panel.get_attribute("class") or "")
        page.context.close()
    finally:
        server.stop()


def test_polling_stands_by_while_the_sidebar_is_hidden(browser: Any, lab_server: LabServer) -> None:
    assert lab_server.put_settings(PLUGIN, {"refreshInterval": 1}) == 204
    page = open_lab(browser, lab_server)
    try:
        # Playwright delivers events while it runs: wait with page.wait_for_timeout, not time.sleep.
        calls: list[str] = []
        page.on("request", lambda r: "/schedulearn/api/gpus" in r.url and calls.append(r.url))
        if page.locator(PANEL).is_visible():  # restored open: close it first
            page.click('.jp-SideBar .lm-TabBar-tab[data-id="schedulearn-sidebar"]')
        page.locator(PANEL).wait_for(state="hidden")
        page.wait_for_timeout(1500)
        calls.clear()
        page.wait_for_timeout(4000)
        assert calls == [], f"{len(calls)} refreshes while hidden"
        open_sidebar(page)
        page.wait_for_timeout(4000)
        assert len(calls) >= 3, f"only {len(calls)} refreshes in 4 s at a 1 s interval"
        page.click('.jp-SideBar .lm-TabBar-tab[data-id="schedulearn-sidebar"]')  # hide again
        page.locator(PANEL).wait_for(state="hidden")
        page.wait_for_timeout(1500)
        n = len(calls)
        page.wait_for_timeout(4000)
        assert len(calls) == n, f"{len(calls) - n} refreshes after hiding"
    finally:
        page.context.close()
        lab_server.put_settings(PLUGIN, {})


def test_timeline_window_follows_the_jobs_so_a_10_s_job_is_a_wide_bar(browser: Any, tmp_path: Any,
                                                                      lab_traits: dict) -> None:
    """A fresh server (no history): the `auto` window spans the jobs that ran, so a 10-s job is
    a bar at least 20 px wide in the default sidebar width; the fixed 6-h window makes it a sliver."""
    own = {**lab_traits, "job_root": str(tmp_path / "jobs"), "store_url": f"sqlite:///{tmp_path / 'jobs.db'}"}
    server = LabServer(tmp_path / "lab-timeline", own).start()
    try:
        page = open_lab(browser, server)
        panel = open_sidebar(page)
        job = submit(server, "ten-seconds", 10)
        server.wait_job(job, {"succeeded"}, timeout=60)
        window = panel.locator("select.jp-schedulearn-window")
        assert window.input_value() == "auto"
        bar = panel.locator(f'rect.jp-schedulearn-bar[data-job-id="{job}"]').first
        bar.wait_for(timeout=30_000)
        wait_until(lambda: float(bar.get_attribute("width")) >= 20, what="the bar to be >= 20 px wide")
        assert "ten-seconds" in bar.locator("title").text_content()
        window.select_option(str(6 * 3600))
        wait_until(lambda: float(bar.get_attribute("width")) < 5, what="a sliver in the 6-hour window")
        # (text_content: the section heading is drawn upper-case by CSS, inner_text would say so)
        assert "last 6 h" in panel.locator(".jp-schedulearn-timeline-head").text_content()
    finally:
        server.stop()


def test_virtual_gpus_show_no_utilisation_bar(lab_page: Any) -> None:
    panel = open_sidebar(lab_page)
    cards = panel.locator(".jp-schedulearn-gpu.jp-mod-virtual")
    cards.first.wait_for()
    assert cards.count() >= 1
    assert panel.locator(".jp-schedulearn-gpu.jp-mod-virtual .jp-schedulearn-util").count() == 0


def test_a_notification_with_a_log_link_when_my_job_ends(lab_page: Any, lab_server: LabServer) -> None:
    open_sidebar(lab_page)
    job = submit(lab_server, "notify-me", 0.5)
    lab_server.wait_job(job, {"succeeded"}, timeout=60)
    toast = lab_page.locator(".Toastify__toast", has_text=f"job #{job} notify-me succeeded")
    toast.wait_for(timeout=30_000)
    toast.locator("button", has_text="Show log").click()
    lab_page.locator(f"#schedulearn-log-{job}").wait_for(timeout=30_000)


def test_a_job_reporting_progress_shows_a_bar_and_its_time_left(lab_page: Any, lab_server: LabServer,
                                                                 shot: Any) -> None:
    """A job that reports its progress (`schedulearn.elastic.report(progress=...)`): its row
    shows the server's estimate (a bar filled to the fraction done, `N% done · ~… left`), and
    the time limit it runs under."""
    script = ("import time\nfrom schedulearn import elastic\nfor i in range(1, 4):\n"
              "    time.sleep(0.5)\n    elastic.report(progress=i / 10)\ntime.sleep(60)\n")
    status, job = lab_server.api("POST", "jobs", {"name": "progress", "script": script, "time_limit": 600})
    assert status == 201, job
    open_sidebar(lab_page)
    bar = row(lab_page, job["id"]).locator(".jp-schedulearn-progress")
    bar.wait_for(timeout=60_000)
    lab_page.wait_for_function(
        "(id) => document.querySelector(`tr[data-job-id='${id}'] .jp-schedulearn-progress`)"
        "?.dataset.progress === '30.0'", arg=job["id"], timeout=60_000)
    meta = row(lab_page, job["id"]).locator(".jp-schedulearn-job-meta").inner_text()
    assert "30% done" in meta and "left" in meta and "(time limit 10m 0s)" in meta, meta
    fill = bar.locator(".jp-schedulearn-progress-fill").get_attribute("style")
    assert "width: 30.0%" in fill, fill
    shot(lab_page, "job-progress")
    assert lab_server.api("DELETE", f"jobs/{job['id']}")[0] == 200
