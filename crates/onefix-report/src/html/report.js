// onefix's HTML report viewer: draws the embedded data (findings, flame graphs, timeline, hot
// lines). No network, no libraries: the page must open anywhere, offline, as one file.
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('onefix-data').textContent);
  var app = document.getElementById('app');
  var ROW = 18;

  function el(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === 'text') node.textContent = attrs[k];
        else if (k === 'cls') node.className = attrs[k];
        else node.setAttribute(k, attrs[k]);
      });
    }
    for (var i = 2; i < arguments.length; i++) {
      var kid = arguments[i];
      if (kid === null || kid === undefined) continue;
      node.appendChild(typeof kid === 'string' ? document.createTextNode(kid) : kid);
    }
    return node;
  }
  function pct(x) { return (100 * x).toFixed(x < 0.1 && x > 0 ? 1 : 0) + '%'; }
  function pct1(x) { return (100 * x).toFixed(1) + '%'; }
  function base(path) { var i = path.lastIndexOf('/'); return i < 0 ? path : path.slice(i + 1); }
  function amount(weight, flame) {
    var v = weight * flame.per_weight;
    if (flame.unit === 'bytes') {
      var units = ['B', 'kB', 'MB', 'GB', 'TB'], u = 0;
      while (v >= 1000 && u < units.length - 1) { v /= 1000; u++; }
      return (u ? v.toFixed(1) : v.toFixed(0)) + ' ' + units[u];
    }
    return v >= 1 ? v.toFixed(2) + ' s' : (v * 1000).toFixed(1) + ' ms';
  }
  function hash(text) {
    var h = 2166136261;
    for (var i = 0; i < text.length; i++) { h ^= text.charCodeAt(i); h = Math.imul(h, 16777619); }
    return (h >>> 0) / 4294967296;
  }

  // ---- header ----
  var sub = document.getElementById('subtitle');
  data.runs.forEach(function (run) {
    var r = run.report;
    var what = r.unit === 'bytes' ? 'allocations' : r.mode + ' mode, ' + r.rate_hz + ' Hz';
    var over = r.duration_s > 0 || !r.imported_from ? ' over ' + r.duration_s.toFixed(2) + ' s' : '';
    var line = (data.runs.length > 1 ? run.label + ': ' : '') + r.samples + ' samples' + over + ' (' + what + ') of ' +
      (r.target.argv ? r.target.argv.join(' ') : r.imported_from ? 'a ' + r.imported_from.format + ' read from ' + r.imported_from.source : 'pid ' + r.target.pid) +
      (r.share_of ? '; shares are of the ' + r.share_of : '');
    sub.appendChild(el('div', { cls: 'muted' }, line));
  });

  function section(title, id) {
    var s = el('section', { id: id }, el('h2', { text: title }));
    app.appendChild(s);
    return s;
  }
  // Lays out one block per run: side by side for two runs.
  function perRun(parent, draw) {
    // Attached before drawing, so that drawings can measure their width.
    var cols = el('div', { cls: data.runs.length > 1 ? 'cols' : '' });
    parent.appendChild(cols);
    data.runs.forEach(function (run) {
      var col = el('div', { cls: 'run' });
      if (data.runs.length > 1) col.appendChild(el('h3', { text: run.label }));
      cols.appendChild(col);
      draw(run, col);
    });
  }

  // ---- verdict (onefix compare --html) ----
  if (data.comparison) {
    var c = data.comparison;
    var verdict = section('Verdict', 'verdict');
    (c.verdicts || []).forEach(function (v, i) {
      verdict.appendChild(el(i === 0 ? 'p' : 'p', { cls: i === 0 ? 'verdict lead' : 'verdict' }, v));
    });
    function ms(x) { return x === null || x === undefined || !isFinite(x) ? '-' : (x >= 100 ? x.toFixed(0) : x >= 1 ? x.toFixed(1) : x.toFixed(3)); }
    if (c.runs && c.runs.lines && c.runs.lines.length) {
      var rt = el('table', { cls: 'lines runs' }, el('tr', null, el('th', { cls: 'num', text: 'A (s)' }), el('th', { cls: 'num', text: 'B (s)' }),
        el('th', { text: 'where' }), el('th', { text: 'line (time per whole run)' })));
      c.runs.lines.forEach(function (l) {
        rt.appendChild(el('tr', null, el('td', { cls: 'num', text: l.seconds_a.toFixed(2) }), el('td', { cls: 'num', text: l.seconds_b.toFixed(2) }),
          el('td', { text: l.at || '' }), el('td', { cls: 'code', text: l.line })));
      });
      verdict.appendChild(rt);
    }
    if (c.lines && c.lines.length) {
      // What changed first, then the rest, as `compare` prints them.
      var order = { down: 0, up: 0, gone: 0, new: 0, unclear: 1, unchanged: 2 };
      var rows = c.lines.slice().sort(function (x, y) { return (order[x.change] || 0) - (order[y.change] || 0); }).slice(0, 20);
      var lt = el('table', { cls: 'lines changes' }, el('tr', null, el('th', { cls: 'num', text: 'A' }), el('th', { cls: 'num', text: 'B' }),
        el('th', { text: 'change' }), el('th', { text: 'where' }), el('th', { text: 'line (' + c.unit + ')' })));
      rows.forEach(function (l) {
        var factor = l.change === 'down' ? l.cost.speedup : l.change === 'up' ? 1 / l.cost.speedup : null;
        var change = l.change + (factor && isFinite(factor) ? ' ' + factor.toFixed(1) + 'x' : '') +
          (l.cost.test && (l.change === 'down' || l.change === 'up') ? (l.cost.test.p_value < 0.001 ? ' p<0.001' : ' p=' + l.cost.test.p_value.toFixed(3)) : '');
        var where = l.at_a && l.at_b && l.at_a !== l.at_b ? l.at_a + ' \u2192 ' + l.at_b : (l.at_a || l.at_b || '');
        lt.appendChild(el('tr', { cls: 'change-' + l.change }, el('td', { cls: 'num', text: ms(l.cost.mean_a) }), el('td', { cls: 'num', text: ms(l.cost.mean_b) }),
          el('td', { text: change }), el('td', { text: where }), el('td', { cls: 'code', text: l.line })));
      });
      verdict.appendChild(lt);
    }
  }

  // ---- findings ----
  var findings = section('Findings', 'findings');
  perRun(findings, function (run, col) {
    var r = run.report;
    if (!r.findings.length) col.appendChild(el('p', { cls: 'muted', text: 'No finding: no line of your code stands out in this recording.' }));
    r.findings.forEach(function (f) {
      var card = el('div', { cls: 'finding', 'data-rank': f.rank },
        el('div', { cls: 'headline' },
          el('span', { cls: 'rank', text: '#' + f.rank }),
          el('span', { cls: 'loc mono', text: base(f.file) + ':' + f.line }),
          f.code ? el('code', { text: f.code }) : null,
          el('span', { cls: 'share', text: pct(f.share) })),
        el('div', { cls: 'kind' }, f.kind + ': ' + f.title),
        f.why ? el('div', { cls: 'why' }, f.why) : null,
        el('div', { cls: 'fix' }, el('b', { text: 'fix: ' }), f.advice),
        f.max_speedup ? el('div', { cls: 'gain' }, el('b', { text: 'if this cost went away: ' }), 'up to ' + f.max_speedup.toFixed(1) + 'x faster' +
          (f.max_speedup_range ? ' (with this many samples, ' + (f.max_speedup_range[1] === null ? 'at least ' + f.max_speedup_range[0].toFixed(1) + 'x)'
            : 'anywhere from ' + f.max_speedup_range[0].toFixed(1) + 'x to ' + f.max_speedup_range[1].toFixed(1) + 'x)') : '')) : null,
        el('div', { cls: 'muted' }, (f.recurrence === null ? 'no sample times to tell when it ran' : 'seen in ' + pct(f.recurrence) + ' of time windows') +
          (f.enclosing_loop ? '; inside the loop at ' + base(f.enclosing_loop) : '') + '; in ' + f.function + ' (' + f.file + ')'));
      if (f.evidence.length) {
        var table = el('table', { cls: 'evidence' }, el('tr', null, el('th', { text: 'evidence' }), el('th', { text: 'where' }), el('th', { cls: 'num', text: 'share' })));
        f.evidence.forEach(function (e) {
          table.appendChild(el('tr', null, el('td', { cls: 'mono', text: e.frame }),
            el('td', { cls: 'mono muted', text: e.file ? base(e.file) + (e.line ? ':' + e.line : '') : '' }),
            el('td', { cls: 'num', text: pct1(e.share) })));
        });
        card.appendChild(table);
      }
      col.appendChild(card);
    });
    if (r.notes.length) {
      var ul = el('ul', { cls: 'notes' });
      r.notes.forEach(function (n) { ul.appendChild(el('li', { text: n })); });
      col.appendChild(ul);
    }
    if (!r.complete) col.appendChild(el('p', { cls: 'muted', text: 'The recording ends early: this covers what was recorded.' }));
  });

  // ---- flame graphs ----
  // A generic tree: {name, v, s, kids, parent, depth, color, tip}.
  // The data holds each tree flat, in preorder with each node's depth `d`: it is rebuilt here
  // without recursion, so that a stack of any depth opens. `make` may return null to leave a
  // node out, and with it everything beneath it.
  function build(list, make) {
    var root = null, path = [];
    list.forEach(function (n) {
      var parent = n.d > 0 ? path[n.d - 1] : null;
      if (n.d > 0 && !parent) return;
      var node = make(n, parent, n.d);
      path.length = n.d;
      if (node === null) return;
      path.push(node);
      if (parent) parent.kids.push(node); else root = node;
    });
    return root;
  }
  function fromRun(run, flame) {
    var root = build(flame.nodes, function (n, parent, depth) {
      var fr = n.f >= 0 ? run.frames[n.f] : { name: 'all', kind: 'root', hot: false };
      return { name: fr.name, v: n.v, s: n.s, parent: parent, depth: depth, kids: [], frame: fr };
    });
    var total = root.v || 1;
    return {
      root: root,
      color: function (n) {
        var h = hash(n.name);
        if (n.frame.kind === 'root') return '#c9ced6';
        if (n.frame.hot) return 'hsl(8,' + (70 + 15 * h) + '%,' + (58 + 8 * h) + '%)';
        if (n.frame.kind === 'python') return 'hsl(' + (45 + 15 * h) + ',80%,' + (60 + 10 * h) + '%)';
        if (n.frame.kind === 'kernel') return 'hsl(' + (200 + 20 * h) + ',60%,70%)';
        return 'hsl(' + (20 + 15 * h) + ',75%,' + (62 + 8 * h) + '%)';
      },
      tip: function (n) {
        return n.name + '\n' + amount(n.v, flame) + ', ' + pct1(n.v / total) + ' of ' + flame.name +
          (n.s ? ' (self ' + amount(n.s, flame) + ')' : '');
      }
    };
  }
  function fromDiff(diff) {
    var ta = diff[0].a || 1, tb = diff[0].b || 1, most = 0;
    var root = build(diff, function (n, parent, depth) {
      if (depth > 0 && !(n.b > 0)) return null;
      var node = { name: n.name, v: n.b, a: n.a, b: n.b, parent: parent, depth: depth, kids: [] };
      node.delta = n.b / tb - n.a / ta;
      most = Math.max(most, Math.abs(node.delta));
      return node;
    });
    return {
      root: root,
      color: function (n) {
        var x = most > 0 ? n.delta / most : 0;
        if (Math.abs(x) < 0.02) return '#dfe3e8';
        return x > 0 ? 'hsl(0,80%,' + (92 - 40 * x) + '%)' : 'hsl(215,80%,' + (92 + 40 * x) + '%)';
      },
      tip: function (n) {
        var d = n.delta * 100;
        return n.name + '\nbefore ' + pct1(n.a / ta) + ', after ' + pct1(n.b / tb) + ' (' + (d >= 0 ? '+' : '') + d.toFixed(1) + ' points)';
      }
    };
  }

  // Draws a tree as an icicle (callers above callees) with search, zoom and click to focus.
  function flameView(parent, tree) {
    var controls = el('div', { cls: 'controls' });
    var search = el('input', { type: 'search', placeholder: 'search frames (regular expression)', 'aria-label': 'search frames' });
    var reset = el('button', { type: 'button', text: 'reset zoom' });
    var matched = el('span', { cls: 'muted matched' });
    controls.appendChild(search); controls.appendChild(reset); controls.appendChild(matched);
    var crumbs = el('div', { cls: 'crumbs' });
    var box = el('div', { cls: 'flame' });
    parent.appendChild(controls); parent.appendChild(crumbs); parent.appendChild(box);
    var focus = tree.root, pattern = null;

    function matches(n) { return pattern !== null && pattern.test(n.name); }
    function draw() {
      box.textContent = '';
      var width = box.clientWidth || 1000;
      var ancestors = [];
      for (var a = focus.parent; a; a = a.parent) ancestors.unshift(a);
      function frameDiv(n, x, w, row, cls) {
        var d = el('div', { cls: 'frame' + cls + (matches(n) ? ' match' : ''), title: tree.tip(n), 'data-name': n.name });
        d.style.left = x + 'px'; d.style.width = Math.max(w - 1, 1) + 'px'; d.style.top = row * ROW + 'px';
        if (!matches(n)) d.style.background = tree.color(n);
        if (w > 28) d.textContent = n.name;
        d.addEventListener('click', function () { focus = n; draw(); });
        box.appendChild(d);
      }
      ancestors.forEach(function (n, i) { frameDiv(n, 0, width, i, ' ancestor'); });
      // The height follows the rows actually drawn: deep but narrow stacks (imports at
      // start-up) must not stretch the graph.
      var rows = ancestors.length + 1;
      // Laid out with a stack of its own, not by recursion: a stack may be thousands deep.
      var pending = [[focus, 0, width, ancestors.length]];
      while (pending.length) {
        var at = pending.pop(), n = at[0], x = at[1], w = at[2], row = at[3];
        rows = Math.max(rows, row + 1);
        frameDiv(n, x, w, row, n === focus ? ' focus' : '');
        var cx = x, next = [];
        n.kids.forEach(function (k) {
          var kw = w * k.v / (n.v || 1);
          if (kw >= 0.5) next.push([k, cx, kw, row + 1]);
          cx += kw;
        });
        for (var i = next.length - 1; i >= 0; i--) pending.push(next[i]);
      }
      box.style.height = (rows * ROW + 2) + 'px';
      crumbs.textContent = focus === tree.root ? 'click a frame to zoom into it' :
        'zoomed into: ' + ancestors.concat([focus]).slice(1).map(function (n) { return n.name; }).join(' \u2192 ');
    }
    // Weight under frames that match, each stack counted once.
    function matchedWeight(root) {
      var sum = 0, pending = [root];
      while (pending.length) {
        var n = pending.pop();
        if (matches(n)) sum += n.v;
        else for (var i = 0; i < n.kids.length; i++) pending.push(n.kids[i]);
      }
      return sum;
    }
    search.addEventListener('input', function () {
      var text = search.value.trim();
      pattern = null;
      if (text) {
        try { pattern = new RegExp(text, 'i'); } catch (e) { pattern = new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i'); }
      }
      matched.textContent = pattern ? 'matched ' + pct1(matchedWeight(tree.root) / (tree.root.v || 1)) : '';
      draw();
    });
    reset.addEventListener('click', function () { focus = tree.root; draw(); });
    window.addEventListener('resize', draw);
    draw();
  }

  var flames = section('Flame graph', 'flamegraph');
  flames.appendChild(el('p', { cls: 'muted', text: 'Callers above callees; widths are shares of the weight. Click a frame to focus on it, search to highlight. Red frames are lines with a finding or a hot line.' }));
  perRun(flames, function (run, col) {
    if (!run.flames.length) { col.appendChild(el('p', { cls: 'muted', text: 'No sample to draw.' })); return; }
    var holder = el('div');
    var choose = null;
    if (run.flames.length > 1) {
      choose = el('select', { 'aria-label': 'weight' });
      run.flames.forEach(function (f, i) { choose.appendChild(el('option', { value: i, text: f.name })); });
      col.appendChild(el('div', { cls: 'controls' }, 'weight: ', choose));
    }
    col.appendChild(holder);
    function show(i) { holder.textContent = ''; flameView(holder, fromRun(run, run.flames[i])); }
    if (choose) choose.addEventListener('change', function () { show(+choose.value); });
    show(0);
  });
  if (data.diff) {
    flames.appendChild(el('h3', { text: 'Difference: ' + data.runs[1].label + ' against ' + data.runs[0].label }));
    flames.appendChild(el('p', { cls: 'muted', text: 'Widths are the after run; red frames take a larger share after, blue a smaller one.' }));
    var diffHolder = el('div', { id: 'diff' });
    flames.appendChild(diffHolder);
    flameView(diffHolder, fromDiff(data.diff));
  }

  // ---- timeline ----
  var timelines = section('Timeline', 'timeline');
  timelines.appendChild(el('div', { cls: 'legend muted' }, 'samples per thread over time:',
    el('span', { style: 'background:#2f8f4e' }), 'running', el('span', { style: 'background:#9aa5b1' }), 'waiting'));
  perRun(timelines, function (run, col) {
    var t = run.timeline;
    if (!t) {
      col.appendChild(el('p', { cls: 'muted', text: 'this profile has no sample times: no timeline' }));
      return;
    }
    var box = el('div', { cls: 'timeline' });
    var most = t.bucket_full;
    if (!(most > 0)) {
      t.threads.forEach(function (row) { row.running.forEach(function (v, i) { most = Math.max(most, v + row.waiting[i]); }); });
    }
    var svgNs = 'http://www.w3.org/2000/svg';
    t.threads.forEach(function (row) {
      var n = row.running.length;
      var svg = document.createElementNS(svgNs, 'svg');
      svg.setAttribute('viewBox', '0 0 ' + n + ' 20');
      svg.setAttribute('preserveAspectRatio', 'none');
      row.running.forEach(function (run, i) {
        var wait = row.waiting[i];
        var hr = Math.min(20, 20 * run / (most || 1)), hw = Math.min(20 - hr, 20 * wait / (most || 1));
        [[hr, 20 - hr, '#2f8f4e'], [hw, 20 - hr - hw, '#9aa5b1']].forEach(function (bar) {
          if (bar[0] <= 0) return;
          var rect = document.createElementNS(svgNs, 'rect');
          rect.setAttribute('x', i); rect.setAttribute('width', 1);
          rect.setAttribute('y', bar[1]); rect.setAttribute('height', bar[0]);
          rect.setAttribute('fill', bar[2]);
          svg.appendChild(rect);
        });
      });
      box.appendChild(el('div', { cls: 'row' }, el('div', { cls: 'name mono', title: row.name, text: row.name }), svg));
    });
    var seconds = (t.threads.length ? t.threads[0].running.length : 0) * t.bucket_s;
    box.appendChild(el('div', { cls: 'muted' }, '0 s to ' + seconds.toFixed(1) + ' s, ' + (t.bucket_s * 1000).toFixed(0) + ' ms per bar' +
      (t.threads_left_out ? '; ' + t.threads_left_out + ' quieter threads not shown' : '')));
    col.appendChild(box);
    if (run.load) drawLoad(run.load, col);
    if (run.memory) drawMemory(run.memory, col);
  });

  // A memory recording: the RSS (blue) and the live sampled heap (orange) over time, in MB.
  function drawMemory(mem, col) {
    col.appendChild(el('h3', { text: 'Memory' }));
    col.appendChild(el('div', { cls: 'muted memory-summary' }, 'peak RSS ' + (mem.peak_rss_mb == null ? '?' : (+mem.peak_rss_mb).toFixed(1) + ' MB') +
      '; RSS in blue, sampled live heap in orange'));
    var series = [['#4c78a8', mem.rss_mb || []], ['#f58518', mem.live_mb || []]];
    var end = 0, most = 0;
    series.forEach(function (s) { s[1].forEach(function (p) { end = Math.max(end, p[0]); most = Math.max(most, p[1]); }); });
    if (!end || !most) return;
    var svgNs = 'http://www.w3.org/2000/svg';
    var svg = document.createElementNS(svgNs, 'svg');
    svg.setAttribute('viewBox', '0 0 100 40');
    svg.setAttribute('preserveAspectRatio', 'none');
    svg.style.height = '64px';
    series.forEach(function (s) {
      if (!s[1].length) return;
      var poly = document.createElementNS(svgNs, 'polyline');
      poly.setAttribute('points', s[1].map(function (p) { return (100 * p[0] / end) + ',' + (40 - 40 * p[1] / most); }).join(' '));
      poly.setAttribute('fill', 'none'); poly.setAttribute('stroke', s[0]); poly.setAttribute('stroke-width', '1.5');
      poly.setAttribute('vector-effect', 'non-scaling-stroke');
      svg.appendChild(poly);
    });
    var box = el('div', { cls: 'timeline memory' });
    box.appendChild(el('div', { cls: 'row' }, el('div', { cls: 'name', text: 'MB over ' + end.toFixed(1) + ' s (max ' + most.toFixed(1) + ')' }), svg));
    col.appendChild(box);
  }

  // The load that drove the target: request rate per window (bars) and latency p50/p99 (lines).
  function drawLoad(load, col) {
    var lat = load.latency_ms || {};
    col.appendChild(el('h3', { text: 'Load' }));
    col.appendChild(el('div', { cls: 'muted load-summary' }, load.completed + ' requests, ' + (+load.achieved_rps).toFixed(0) + ' per second' +
      (load.target_rps ? ' (asked ' + load.target_rps + ')' : '') + ', ' + load.errors + ' errors; latency p50 ' +
      (+lat.p50).toFixed(1) + ' ms, p99 ' + (+lat.p99).toFixed(1) + ' ms, max ' + (+lat.max).toFixed(1) + ' ms'));
    var windows = load.windows || [];
    if (!windows.length) return;
    var svgNs = 'http://www.w3.org/2000/svg';
    function chart(label, values, lines) {
      var most = 0;
      values.concat.apply(values, lines.map(function (l) { return l[1]; })).forEach(function (v) { most = Math.max(most, +v || 0); });
      var svg = document.createElementNS(svgNs, 'svg');
      svg.setAttribute('viewBox', '0 0 ' + windows.length + ' 40');
      svg.setAttribute('preserveAspectRatio', 'none');
      svg.style.height = '44px';
      values.forEach(function (v, i) {
        var h = 40 * (+v || 0) / (most || 1);
        var rect = document.createElementNS(svgNs, 'rect');
        rect.setAttribute('x', i + 0.1); rect.setAttribute('width', 0.8); rect.setAttribute('y', 40 - h); rect.setAttribute('height', h);
        rect.setAttribute('fill', '#4c78a8');
        svg.appendChild(rect);
      });
      lines.forEach(function (l) {
        var poly = document.createElementNS(svgNs, 'polyline');
        poly.setAttribute('points', l[1].map(function (v, i) { return (i + 0.5) + ',' + (40 - 40 * (+v || 0) / (most || 1)); }).join(' '));
        poly.setAttribute('fill', 'none'); poly.setAttribute('stroke', l[0]); poly.setAttribute('stroke-width', '1.5');
        poly.setAttribute('vector-effect', 'non-scaling-stroke');
        svg.appendChild(poly);
      });
      return el('div', { cls: 'row' }, el('div', { cls: 'name', text: label + ' (max ' + most.toFixed(1) + ')' }), svg);
    }
    var box = el('div', { cls: 'timeline load' });
    box.appendChild(chart('requests per second', windows.map(function (w) { return w.rps; }), []));
    box.appendChild(chart('latency ms: p50 green, p99 red', [], [['#2f8f4e', windows.map(function (w) { return w.p50_ms; })],
      ['#d9482b', windows.map(function (w) { return w.p99_ms; })]]));
    col.appendChild(box);
  }

  // ---- hot lines ----
  var hot = section('Hot lines of your code', 'hotlines');
  perRun(hot, function (run, col) {
    var r = run.report;
    if (!r.hot_lines.length) { col.appendChild(el('p', { cls: 'muted', text: 'No sample fell in your code.' })); return; }
    r.hot_lines.forEach(function (h) {
      var item = el('div', { cls: 'hotline' },
        el('div', null, el('b', { text: pct1(h.share) }), ' ', el('span', { cls: 'mono', text: base(h.file) + ':' + h.line }), ' ',
          el('span', { cls: 'muted', text: h.function + ' (self ' + pct1(h.self_share) + ', blocked ' + pct1(h.blocked_share) + ')' })));
      var snippet = run.sources.filter(function (s) { return s.file === h.file && s.line === h.line; })[0];
      if (snippet) {
        var pre = el('pre');
        snippet.text.forEach(function (text, i) {
          var n = snippet.first + i;
          pre.appendChild(el('span', { cls: n === h.line ? 'here' : '' }, el('i', { text: String(n) }), text));
        });
        item.appendChild(pre);
      } else if (h.code) {
        item.appendChild(el('pre', null, el('span', { cls: 'here' }, el('i', { text: String(h.line) }), h.code)));
      }
      col.appendChild(item);
    });
  });
  document.body.setAttribute('data-rendered', 'true');
})();
