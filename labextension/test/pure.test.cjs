// Unit tests of the pure modules (compiled to CommonJS by tsconfig.test.json); run: npm test
const test = require('node:test');
const assert = require('node:assert/strict');
const { formatDuration, formatAlloc, formatSpan, waited, ran, ranText, utilisationPercent, requestedGpus, shownGpus, progressText, progressPercent, deadlineText, drawn, writeToScreen, screenText, clock, pausedText, heldLabel } = require('../build-test/format.js');
const { computeBars, autoSpan, axisTicks } = require('../build-test/timeline.js');
const { sortJobs } = require('../build-test/jobs.js');

const job = (over) => ({
  id: 1, name: 'j', user: 'u', state: 'queued', submit_time: 1000, start_time: null,
  end_time: null, gpus: 0, alloc: {}, ...over
});
const nodes = [
  { name: 'node0', virtual: true, gpus: [0, 1].map(i => ({ index: i, uuid: '', name: 'v', memory_total_mb: 0, memory_used_mb: 0, utilization: 0, job_id: null })) }
];

test('formatDuration', () => {
  assert.equal(formatDuration(5), '5s');
  assert.equal(formatDuration(75), '1m 15s');
  assert.equal(formatDuration(3 * 3600 + 120), '3h 2m');
  assert.equal(formatDuration(50 * 3600), '2d 2h');
  assert.equal(formatDuration(null), '–');
  assert.equal(formatDuration(-1), '–');
});

test('waited and ran', () => {
  assert.equal(waited(job({}), 1010), 10);
  assert.equal(waited(job({ start_time: 1004 }), 2000), 4);
  assert.equal(ran(job({}), 1010), null);
  assert.equal(ran(job({ run_s: 0 }), 1010), null);
  assert.equal(ran(job({ start_time: 1004 }), 1010), 6);
  assert.equal(ran(job({ start_time: 1004, end_time: 1005 }), 1010), 1);
  assert.equal(ran(job({ start_time: 1004, run_s: 3.5 }), 1010), 3.5);
  assert.equal(ranText(job({}), 1010), null);
  assert.equal(ranText(job({ start_time: 1004, end_time: 1005 }), 1010), 'ran 1s');
  const limited = job({ state: 'running', start_time: 750, run_s: 250, spec: { time_limit: 600 } });
  assert.equal(ranText(limited, 1010), 'ran 4m 10s (time limit 10m 0s)');
  assert.equal(ranText({ ...limited, state: 'failed' }, 1010), 'ran 4m 10s'); // the reason says it after
  assert.equal(ranText({ ...limited, spec: { time_limit: null } }, 1010), 'ran 4m 10s');
});

test('formatAlloc, requestedGpus, utilisationPercent', () => {
  assert.equal(formatAlloc({ node1: [2], node0: [0, 1], node2: [] }), 'node0:0,1 node1:2');
  assert.equal(requestedGpus(job({ spec: { gpus: 'auto' } })), 'auto');
  assert.equal(requestedGpus(job({ gpus: 2 })), '2');
  // shown: held now, else last held (a finished --gpus auto job shows what it got), else asked
  assert.equal(shownGpus(job({ state: 'running', gpus: 3, spec: { gpus: 'auto' } })), '3');
  assert.equal(shownGpus(job({ state: 'succeeded', spec: { gpus: 'auto' }, last_alloc: { n0: [0, 1], n1: [2] } })), '3');
  assert.equal(shownGpus(job({ state: 'queued', spec: { gpus: 'auto' } })), 'auto');
  assert.equal(utilisationPercent(0.5), 50);
  assert.equal(utilisationPercent(73), 73);
  assert.equal(utilisationPercent(250), 100);
  assert.equal(utilisationPercent(undefined), 0);
  assert.equal(formatSpan(6), '6 h');
  assert.equal(formatSpan(1.25), '1.3 h');
  assert.equal(formatSpan(0.05), '3 min');
});

test('computeBars: rows per GPU, bars clipped to the span, remembered allocations used', () => {
  const now = 10000;
  const jobs = [
    job({ id: 1, state: 'running', start_time: 9000, alloc: { node0: [1] } }),
    job({ id: 2, state: 'succeeded', start_time: 100, end_time: 9500 }), // alloc remembered
    job({ id: 3, state: 'succeeded', start_time: 100, end_time: 200, alloc: {} }), // before the span
    job({ id: 4, state: 'queued' }), // never started
    job({ id: 5, state: 'failed', start_time: 9900, end_time: 9950, last_alloc: { node9: [0] } })
  ];
  const remembered = new Map([[2, { node0: [0] }], [3, { node0: [0] }]]);
  const tl = computeBars(nodes, jobs, remembered, now, 3600);
  assert.deepEqual(tl.rows, ['node0:0', 'node0:1', 'node9:0']);
  assert.equal(tl.from, now - 3600);
  const byJob = Object.fromEntries(tl.bars.map(b => [b.jobId, b]));
  assert.deepEqual(Object.keys(byJob).map(Number).sort(), [1, 2, 5]);
  assert.deepEqual([byJob[1].row, byJob[1].start, byJob[1].end], ['node0:1', 9000, now]);
  assert.deepEqual([byJob[2].row, byJob[2].start, byJob[2].end], ['node0:0', now - 3600, 9500]);
  assert.equal(byJob[5].row, 'node9:0');
});

test('sortJobs: running, then queued, then finished newest first', () => {
  const order = sortJobs([
    job({ id: 1, state: 'succeeded', end_time: 5 }),
    job({ id: 2, state: 'queued' }),
    job({ id: 3, state: 'running' }),
    job({ id: 4, state: 'failed', end_time: 9 }),
    job({ id: 5, state: 'queued' })
  ]).map(j => j.id);
  assert.deepEqual(order, [3, 2, 5, 4, 1]);
});

test('autoSpan: the window follows the jobs (a 10-s job is a tenth of it), at least 1 min, at most the limit', () => {
  const now = 100000;
  const tenSeconds = job({ state: 'succeeded', start_time: now - 30, end_time: now - 20 });
  assert.equal(autoSpan([tenSeconds], now, 6 * 3600), 60); // the 1-minute floor
  const older = job({ id: 2, state: 'succeeded', start_time: now - 600, end_time: now - 590 });
  assert.equal(Math.round(autoSpan([tenSeconds, older], now, 6 * 3600)), 660); // 10 % margin
  const ancient = job({ id: 3, state: 'succeeded', start_time: now - 10 * 3600, end_time: now - 9 * 3600 });
  assert.equal(Math.round(autoSpan([tenSeconds, ancient], now, 6 * 3600)), 60); // ended before the limit
  const longRunning = job({ id: 4, state: 'running', start_time: now - 10 * 3600 });
  assert.equal(autoSpan([longRunning], now, 6 * 3600), 6 * 3600); // never more than the limit
  assert.equal(autoSpan([job({})], now, 3600), 60); // nothing ran yet
  assert.equal(formatSpan(60 / 3600), '1 min');
  assert.equal(formatSpan(5 / 3600), '1 min');
});

test('progressText and progressPercent: what the estimate knows', () => {
  const running = job({ state: 'running', progress: 0.42, eta_s: 725, eta_basis: 'progress' });
  assert.equal(progressText(running), '42% done · ~12m 5s left');
  assert.equal(progressText({ ...running, progress: undefined, eta_basis: 'history' }), '~12m 5s left?');
  assert.equal(progressText(job({ progress: 0.5, eta_s: 9 })), '50% done'); // queued: no time left
  assert.equal(progressText(job({ state: 'succeeded', progress: 1 })), '');
  assert.equal(progressText(job({})), '');
  assert.equal(progressText({ ...running, eta_s: undefined, silent_s: 420 }), '42% done · no report for 7m 0s');
  assert.equal(progressText({ ...running, state: 'failed', silent_s: 420 }), '42% done'); // only while it runs
  assert.equal(progressPercent(running), 42);
  assert.equal(progressPercent(job({ state: 'failed', progress: 0.3 })), null);
  assert.equal(progressPercent(job({ state: 'running', progress: 1.7 })), 100);
});

test('deadlineText: time to the deadline and the scheduler\'s estimate, then met or missed by', () => {
  assert.equal(deadlineText(job({ state: 'running', deadline: 5000, deadline_status: 'at_risk' }), 1100), 'due in 1h 5m · at risk');
  assert.equal(deadlineText(job({ deadline: 1600, deadline_status: 'will_miss' }), 1000), 'due in 10m 0s · will miss');
  assert.equal(deadlineText(job({ state: 'running', deadline: 900, deadline_status: 'missed' }), 1080), 'due 3m 0s ago');
  assert.equal(deadlineText(job({ state: 'succeeded', deadline: 900, deadline_status: 'met' }), 2000), 'deadline met');
  assert.equal(deadlineText(job({ state: 'succeeded', deadline: 900, deadline_status: 'missed', missed_by_s: 720 }), 2000), 'missed by 12m 0s');
  assert.equal(deadlineText(job({ state: 'running' }), 1000), '');
});

test('a log shown as a terminal would: a progress bar at its last drawing, whatever the pieces', () => {
  assert.equal(drawn('epoch 1\repoch 2\repoch 10'), 'epoch 10');
  assert.equal(drawn('100%\r 50%\r'), ' 50%');  // what a drawing does not reach stays
  assert.equal(drawn('training 12/100\rtrai'), 'training 12/100');  // a drawing read in part
  assert.equal(drawn('plain'), 'plain');
  assert.equal(drawn(''), '');
  const log = 'setup\n' + Array.from({ length: 100 }, (_, i) => `\rtraining ${i + 1}/100`).join('') + '\nsaved\n';
  const whole = screenText(writeToScreen({ shown: '', open: '' }, log));
  assert.equal(whole, 'setup\ntraining 100/100\nsaved\n');
  for (const size of [1, 3, 7, 64]) { // the same, read in pieces of any size
    let screen = { shown: '', open: '' };
    const seen = [];
    for (let i = 0; i < log.length; i += size) {
      screen = writeToScreen(screen, log.slice(i, i + size));
      seen.push(screenText(screen));
    }
    assert.equal(screenText(screen), whole);
    // the bar redrawn in place
    assert.ok(seen.some(t => /^setup\ntraining [1-9][0-9]?\/100$/.test(t)), `size ${size}`);
    assert.ok(seen.every(t => !t.includes('\r')));
  }
  // an endless progress line keeps only its last drawing; ended lines at most `max` characters
  let screen = { shown: '', open: '' };
  for (let i = 0; i < 20000; i++) {
    screen = writeToScreen(screen, `\rstep ${i}`, 50);
  }
  assert.ok(screen.open.length <= 8192 + 12);
  assert.equal(screenText(screen), 'step 19999');
  screen = writeToScreen(screen, '\n' + 'x'.repeat(60) + '\nend', 50);
  assert.equal(screen.shown.length, 50);
  assert.equal(screenText(screen), 'x'.repeat(49) + '\nend');
});

test('axisTicks: round times whose labels do not touch, within the plot, HH:MM:SS only below a minute', () => {
  const at = (h, m, s) => new Date(2026, 0, 2, h, m, s).getTime() / 1000;
  const check = (from, to, plotW) => {
    const ticks = axisTicks(from, to, plotW);
    const px = ticks.map(k => ((k.t - from) / (to - from)) * plotW);
    for (let i = 0; i < ticks.length; i++) {
      const half = (ticks[i].label.length * 6.5) / 2;
      assert.ok(px[i] - half >= 0 && px[i] + half <= plotW, `${ticks[i].label} inside the plot`);
      if (i > 0) {
        assert.ok(px[i] - px[i - 1] >= ticks[i].label.length * 6.5 + 10, `${ticks[i].label} clear of the one before`);
      }
    }
    return ticks.map(k => k.label);
  };
  // the sidebar's 1-minute window, 350 px wide: the labels of the picture ran into each other
  assert.deepEqual(check(at(0, 13, 39), at(0, 14, 39), 350), ['00:13:45', '00:14:00', '00:14:15', '00:14:30']);
  assert.deepEqual(check(at(9, 7, 0), at(9, 17, 0), 350), ['09:08', '09:10', '09:12', '09:14', '09:16']);
  assert.deepEqual(check(at(6, 20, 0), at(12, 20, 0), 350), ['07:00', '08:00', '09:00', '10:00', '11:00', '12:00']);
  assert.deepEqual(check(at(6, 20, 0), at(12, 20, 0), 120), ['09:00']); // every 3 h; 12:00 would run past the end
  assert.ok(check(at(0, 0, 0), at(0, 0, 30), 40).length <= 1); // too narrow for two: one or none
});

test('clock: the 24-hour time of day, as the timeline axis and the header both show it', () => {
  const t = new Date(2026, 0, 2, 14, 5, 9).getTime() / 1000;
  assert.equal(clock(t), '14:05');
  assert.equal(clock(t, true), '14:05:09');
  assert.equal(clock(new Date(2026, 0, 2, 3, 4, 5).getTime() / 1000, true), '03:04:05');
});

test('pausedText', () => {
  const at = new Date(2026, 10, 29, 18, 40).getTime() / 1000;
  assert.equal(pausedText({ by: 'carol', since: at, reason: 'reboot at 19:00' }, at + 600),
    'Scheduling paused by carol at 18:40 (reboot at 19:00): no job starts until an admin resumes it.');
  assert.equal(pausedText({ by: '', since: at, reason: '' }, at + 60),
    'Scheduling paused by ? at 18:40: no job starts until an admin resumes it.');
  // begun another day: its date too
  assert.equal(pausedText({ by: 'carol', since: at, reason: '' }, at + 2 * 86400),
    'Scheduling paused by carol on 2026-11-29 18:40: no job starts until an admin resumes it.');
  // the scheduler's own pause ends by itself
  const full = { by: 'schedulearn', since: at, reason: 'the disk of the job root /srv/jobs is full: under 64 MiB free',
    until: 'it has 64 MiB free again' };
  assert.equal(pausedText(full, at + 60), 'Scheduling paused by schedulearn at 18:40 (the disk of the job root '
    + '/srv/jobs is full: under 64 MiB free): no job starts until it has 64 MiB free again.');
});

test('heldLabel', () => {
  assert.equal(heldLabel("job 12 of alice, another scheduler's (pid 4121, since 10:02, job root /home/alice/jobs)"),
    "job 12 of alice, another scheduler's");
  assert.equal(heldLabel('Slurm job 12 (bob)'), 'Slurm job 12 (bob)');  // short: whole
  assert.equal(heldLabel('n1: all 8 CPUs allocated (Slurm job 12)'), 'n1: all 8 CPUs allocated (Slurm job 12)');
  assert.equal(heldLabel('n1: all 8 CPUs allocated'), 'n1: all 8 CPUs allocated');
  assert.equal(heldLabel('(odd)'), '(odd)');
});
