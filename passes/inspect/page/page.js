// The report page's script: draws every section from the data section
// (docs/report.md). Plain DOM and SVG, no libraries, nothing fetched.
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('tilec-data').textContent);
  var SVG_NS = 'http://www.w3.org/2000/svg';
  var T = D.target;

  // ------------------------------------------------------------ helpers

  function el(tag, attrs) {
    var e = document.createElement(tag);
    setAttrs(e, attrs);
    for (var i = 2; i < arguments.length; ++i) add(e, arguments[i]);
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS(SVG_NS, tag);
    setAttrs(e, attrs);
    for (var i = 2; i < arguments.length; ++i) add(e, arguments[i]);
    return e;
  }
  function setAttrs(e, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (k) {
      if (attrs[k] === null || attrs[k] === undefined) return;
      if (k === 'text') e.textContent = attrs[k];
      else if (k.slice(0, 2) === 'on') e.addEventListener(k.slice(2), attrs[k]);
      else e.setAttribute(k, attrs[k]);
    });
  }
  function add(e, child) {
    if (child === null || child === undefined) return;
    if (Array.isArray(child)) child.forEach(function (c) { add(e, c); });
    else e.appendChild(typeof child === 'object' ? child : document.createTextNode(String(child)));
  }
  function body(id) {
    var b = document.querySelector('#' + id + ' .body');
    b.textContent = '';
    return b;
  }
  // Column name -> index, for the data's row arrays.
  function columns(names) {
    var c = {};
    names.forEach(function (n, i) { c[n] = i; });
    return c;
  }
  function num(n) {
    if (n === null || n === undefined || !isFinite(n)) return '-';
    return Math.round(n).toLocaleString('en-US');
  }
  function bytes(n) {
    if (n < 10240) return num(n) + ' B';
    if (n < 10 * 1048576) return (n / 1024).toFixed(1) + ' KiB';
    return (n / 1048576).toFixed(1) + ' MiB';
  }
  function pct(part, whole) {
    return whole > 0 ? (100 * part / whole).toFixed(1) + '%' : '-';
  }
  function micros(cycles) { return (cycles / T.clock_hz * 1e6).toFixed(3) + ' us'; }
  function ratio(a, b) { return b > 0 ? (a / b).toFixed(3) : '-'; }
  // The same colour for an op everywhere on the page.
  function opColor(op) {
    var hue = (op * 137.508) % 360;
    return 'hsl(' + hue.toFixed(1) + ',62%,' + (46 + (op % 3) * 8) + '%)';
  }
  function swatch(op) { return el('span', {class: 'swatch', style: 'background:' + opColor(op)}); }
  // Run-length encoded per-tile arrays ([value, count, ...]).
  var mapCache = {};
  function tileMap(index) {
    if (index < 0) return null;
    if (mapCache[index]) return mapCache[index];
    var runs = D.tile_maps[index], out = [];
    for (var i = 0; i < runs.length; i += 2) {
      for (var k = 0; k < runs[i + 1]; ++k) out.push(runs[i]);
    }
    mapCache[index] = out;
    return out;
  }

  var tooltip = document.getElementById('tooltip');
  // `text`: a string, or a function of the element under the pointer that
  // returns one (or null: no tooltip), so one listener serves a whole grid.
  function hover(target, text) {
    target.addEventListener('mousemove', function (e) {
      var t = typeof text === 'function' ? text(e.target) : text;
      if (t === null) { tooltip.hidden = true; return; }
      tooltip.textContent = t;
      tooltip.hidden = false;
      var x = e.clientX + 14, y = e.clientY + 14;
      var w = tooltip.offsetWidth, h = tooltip.offsetHeight;
      if (x + w > window.innerWidth) x = Math.max(0, e.clientX - w - 8);
      if (y + h > window.innerHeight) y = Math.max(0, e.clientY - h - 8);
      tooltip.style.left = x + 'px';
      tooltip.style.top = y + 'px';
    });
    target.addEventListener('mouseleave', function () { tooltip.hidden = true; });
  }
  function widthOf(container, fallback) {
    return Math.max(600, Math.min(1560, container.clientWidth || fallback));
  }

  // White -> yellow -> red for a share t in [0, 1]; grey for nothing.
  function heat(t) {
    if (!(t > 0)) return '#eceef2';
    t = Math.min(1, t);
    var g = t < 0.5 ? 255 : Math.round(255 * (2 - 2 * t));
    var b = t < 0.5 ? Math.round(255 * (1 - 2 * t)) : 0;
    return 'rgb(255,' + g + ',' + b + ')';
  }

  // A tile grid: one cell per tile, coloured by where values[t] lies in
  // [low, high] (tiles at or below low that hold nothing stay grey).
  // options.rank: colour by rank among the tiles that hold anything (equal
  // values alike), to tell near-equal tiles apart.
  function tileGrid(values, low, high, options) {
    var tiles = values.length;
    var share = function (v) { return high > low ? Math.max(0.02, (v - low) / (high - low)) : 1; };
    if (options.rank) {
      var sorted = values.filter(function (v) { return v > 0; }).sort(function (a, b) { return a - b; });
      share = function (v) {
        var lo = 0, hi = sorted.length;
        while (lo < hi) { var mid = (lo + hi) >> 1; if (sorted[mid] < v) lo = mid + 1; else hi = mid; }
        return sorted.length > 1 ? Math.max(0.02, lo / (sorted.length - 1)) : 1;
      };
    }
    var cols = Math.max(1, Math.round(Math.sqrt(tiles * 1.5)));
    var rows = Math.ceil(tiles / cols);
    var cell = Math.max(6, Math.min(22, Math.floor(760 / cols)));
    var g = svg('svg', {width: cols * cell + 2, height: rows * cell + 2, class: 'tile-grid'});
    for (var t = 0; t < tiles; ++t) {
      var cls = 'tile' + (options.detail && options.detail[t] ? ' detail' : '') +
          (options.selected === t ? ' selected' : '') + (options.onclick ? ' hot' : '');
      var r = svg('rect', {x: 1 + (t % cols) * cell, y: 1 + Math.floor(t / cols) * cell,
        width: cell - 1, height: cell - 1, class: cls,
        fill: values[t] > 0 ? heat(share(values[t])) : heat(0),
        'data-tile': t});
      g.appendChild(r);
    }
    var tileOf = function (target) {
      var t = target.getAttribute && target.getAttribute('data-tile');
      return t === null || t === undefined ? -1 : Number(t);
    };
    hover(g, function (target) { var t = tileOf(target); return t < 0 ? null : options.label(t); });
    if (options.onclick) {
      g.addEventListener('click', function (e) { var t = tileOf(e.target); if (t >= 0) options.onclick(t); });
    }
    return g;
  }
  function heatLegend(low, high) {
    var g = svg('svg', {width: 320, height: 30, class: 'legend-scale'});
    for (var i = 0; i <= 10; ++i) {
      g.appendChild(svg('rect', {x: i * 20, y: 2, width: 20, height: 10, fill: heat(i === 0 ? 0.02 : i / 10)}));
    }
    g.appendChild(svg('text', {x: 0, y: 26, text: low}));
    g.appendChild(svg('text', {x: 220, y: 26, 'text-anchor': 'end', text: high}));
    return g;
  }
  // The heat maps' scale: from zero, or from the least loaded tile that
  // holds anything (contrast between near-equal tiles).
  function scaleSelect(first) {
    return el('select', {}, el('option', {value: 'zero'}, first),
        el('option', {value: 'range'}, 'least to most loaded tile'),
        el('option', {value: 'rank'}, 'rank among tiles'));
  }
  function leastPositive(values) {
    var m = Infinity;
    values.forEach(function (v) { if (v > 0 && v < m) m = v; });
    return m === Infinity ? 0 : m;
  }

  // A table from column specs {name, value(row), text(row)?, num?, cls?};
  // sortable by clicking a header when sortKey is given.
  function table(specs, rows, options) {
    options = options || {};
    var state = {col: options.sortCol === undefined ? -1 : options.sortCol, desc: !!options.desc};
    var thead = el('thead'), tbody = el('tbody');
    var t = el('table', {class: options.cls || ''}, thead, tbody);
    function render() {
      var sorted = rows.slice();
      if (state.col >= 0) {
        var v = specs[state.col].value;
        sorted.sort(function (a, b) {
          var x = v(a), y = v(b);
          var c = typeof x === 'string' ? x.localeCompare(y) : x - y;
          return state.desc ? -c : c;
        });
      }
      thead.textContent = '';
      var tr = el('tr');
      specs.forEach(function (s, i) {
        var cls = (s.num ? 'n ' : '') + 'sortable' +
            (state.col === i ? (state.desc ? ' sorted-desc' : ' sorted-asc') : '');
        tr.appendChild(el('th', {class: cls, title: s.title || null, onclick: function () {
          state.desc = state.col === i ? !state.desc : !!s.num;
          state.col = i;
          render();
        }}, s.name));
      });
      thead.appendChild(tr);
      tbody.textContent = '';
      var limit = options.limit || sorted.length;
      sorted.slice(0, limit).forEach(function (row) {
        var r = el('tr');
        specs.forEach(function (s) {
          var content = s.text ? s.text(row) : s.value(row);
          if (s.num && typeof content === 'number') content = num(content);
          r.appendChild(el('td', {class: ((s.num ? 'n ' : '') + (s.cls || '')).trim() || null}, content));
        });
        tbody.appendChild(r);
      });
      if (sorted.length > limit) {
        tbody.appendChild(el('tr', {}, el('td', {colspan: specs.length, class: 'note'},
            'showing ' + num(limit) + ' of ' + num(sorted.length) + ' rows')));
      }
    }
    render();
    return t;
  }

  // ------------------------------------------------------------ data

  var OC = columns(D.ops.columns);
  var SC = columns(D.steps.columns);
  var ops = D.ops.rows;
  var opById = {};
  ops.forEach(function (o) { opById[o[OC.id]] = o; });
  function opName(op) {
    var o = opById[op];
    return 'op ' + op + (o && o[OC.name] ? ' ' + o[OC.name] : '');
  }
  var steps = D.steps.rows;
  var S = D.summary;

  // Supersteps' and GEMMs' figures the sections share.
  function ampRate(o) { return o[OC.amp_macs_per_cycle]; }
  function simCycles(o) { return o[OC.compute] + o[OC.exchange]; }
  function kernelAmp(o) {
    return o[OC.gemm_cycles] > 0 && ampRate(o) > 0 ? o[OC.macs] / (o[OC.gemm_cycles] * ampRate(o)) : null;
  }
  function chipAmp(o) {
    var c = simCycles(o);
    return c > 0 && ampRate(o) > 0 ? o[OC.macs] / (c * T.tiles * ampRate(o)) : null;
  }
  // Cycles the program's GEMMs would take at AMP peak on every tile.
  function computeFloor() {
    var floor = 0;
    ops.forEach(function (o) { if (ampRate(o) > 0) floor += o[OC.macs] / (T.tiles * ampRate(o)); });
    return floor;
  }

  // ------------------------------------------------------------ summary

  function card(k, v, d, cls) {
    return el('div', {class: 'card'}, el('div', {class: 'k'}, k),
        el('div', {class: 'v ' + (cls || '')}, v), d ? el('div', {class: 'd'}, d) : null);
  }

  function accuracyCard() {
    var s = D.simulation;
    if (!s) return card('Accuracy', 'not measured', 'no simulate-device report given (--simulation)');
    if (!s.compared) return card('Accuracy', 'not compared', s.file + ' ran with --compare=false');
    var lines = s.outputs.map(function (o) {
      return el('div', {}, el('span', {class: o.pass ? 'pass' : 'fail'}, o.pass ? 'PASS ' : 'FAIL '),
          o.name + ' ' + o.type + ': cosine ' + (o.cosine === null ? '-' : o.cosine.toFixed(9)) +
          ', max abs err ' + fmtFloat(o.max_abs_err) + ' (scale ' + fmtFloat(o.scale) + '), ' +
          num(o.mismatches) + '/' + num(o.elements) + ' mismatches');
    });
    var worst = s.outputs.reduce(function (m, o) { return o.cosine !== null && o.cosine < m ? o.cosine : m; }, 1);
    return el('div', {class: 'card'}, el('div', {class: 'k'}, 'Accuracy against the reference'),
        el('div', {class: 'v ' + (s.pass ? 'pass' : 'fail')}, (s.pass ? 'PASS' : 'FAIL') +
            ', cosine ' + worst.toFixed(9)),
        el('div', {class: 'd'}, lines, 'tolerance: atol ' + s.atol + ' x scale, rtol ' + s.rtol +
            ', min cosine ' + s.min_cosine + (s.fp8_defaults ? ' (FP8 defaults)' : '') + '; from ' + s.file));
  }
  function fmtFloat(v) { return v === null ? '-' : Number(v).toPrecision(4); }

  // simulate-device --expect=DIR: each output against a saved file (e.g.
  // PyTorch's), shown only when the report has it. An element fails past
  // atol x the output's scale + rtol x |expected|, so the absolute part is
  // given per output.
  function expectedCard() {
    var e = D.simulation && D.simulation.expected;
    if (!e) return null;
    var lines = e.outputs.map(function (o) {
      return el('div', {class: 'expected-output'},
          el('span', {class: o.pass ? 'pass' : 'fail'}, o.pass ? 'PASS ' : 'FAIL '),
          o.name + ' ' + o.type + ': cosine ' + (o.cosine === null ? '-' : o.cosine.toFixed(9)) +
          ' (min ' + e.min_cosine + '), max abs err ' + fmtFloat(o.max_abs_err) + ' (tolerance ' +
          (o.scale === null ? '-' : fmtFloat(e.atol * o.scale)) + ' = atol ' + e.atol + ' x scale ' +
          fmtFloat(o.scale) + ', rtol ' + e.rtol + '), ' + num(o.mismatches) + '/' + num(o.elements) +
          ' mismatches');
    });
    var worst = e.outputs.reduce(function (m, o) { return o.cosine !== null && o.cosine < m ? o.cosine : m; }, 1);
    return el('div', {class: 'card', id: 'expected'}, el('div', {class: 'k'}, 'Against the expected outputs'),
        el('div', {class: 'v ' + (e.pass ? 'pass' : 'fail')}, (e.pass ? 'PASS' : 'FAIL') +
            ', cosine ' + worst.toFixed(9)),
        el('div', {class: 'd'}, lines, 'expected outputs from ' + e.dir + ' (simulate-device --expect)'));
  }

  // Per image at the target's clock; the GEMMs' MACs as the graph states
  // them against every tile's FP8 rate.
  function throughputCard() {
    var t = D.throughput;
    var peak = pct(t.fp8_peak_fraction, 1) + ' of the FP8 peak';
    var work = num(t.gemm_macs) + ' GEMM MACs in the graph over ' + num(S.cycles) + ' cycles x ' +
        num(t.fp8_peak_macs_per_cycle) + ' FP8 MACs a cycle (' + num(T.tiles) + ' tiles x ' +
        T.amp_macs_fp8 + ')';
    if (t.batch === null) return card('Throughput', peak, 'batch not recorded in the module; ' + work);
    return card('Throughput', t.images_per_second.toFixed(1) + ' images/s',
        'batch ' + t.batch + ', ' + num(t.cycles_per_image) + ' cycles per image at ' + (T.clock_hz / 1e9) +
        ' GHz; ' + peak + ': ' + work);
  }

  function renderSummary() {
    var b = body('summary');
    var floor = computeFloor();
    var host = D.host;
    var seconds = function (v) { return v === null ? 'not given' : v.toFixed(1) + ' s'; };
    b.appendChild(el('p', {class: 'note'}, (D.module.model || 'model not recorded') + ' - ' +
        D.module.name + ' (written by ' + D.module.producer + ')'));
    b.appendChild(el('div', {class: 'cards'},
        card('Simulated', num(S.cycles) + ' cycles', micros(S.cycles) + ' at ' + (T.clock_hz / 1e9) +
            ' GHz on ' + T.name + ' (' + num(T.tiles) + ' tiles)'),
        throughputCard(),
        card('Compute / exchange', pct(S.compute_cycles, S.cycles) + ' / ' + pct(S.exchange_cycles, S.cycles),
            num(S.compute_cycles) + ' + ' + num(S.exchange_cycles) + ' cycles' +
            (S.update_cycles > 0 ? ' + ' + num(S.update_cycles) + ' of repeat address updates' : '') + '; ' +
            num(S.supersteps) + ' supersteps, ' + num(S.exchange_phases) + ' exchange phases'),
        card('Exchange schedules', num(S.exchange_scheduled_cycles) + ' + ' + num(S.sync_cycles) + ' sync',
            'scheduled / endpoint bound = ' + ratio(S.exchange_scheduled_cycles, S.exchange_bound_cycles) +
            ' (bound ' + num(S.exchange_bound_cycles) + ' cycles)'),
        card('Code per tile', bytes(S.code_bytes_max) + ' at most',
            'exchange tables up to ' + bytes(S.exchange_code_bytes_max) + '; the tile with the most code has ' +
            bytes(S.tensor_bytes) + ' left for tensors'),
        card('Planner estimate', num(S.estimate_cycles) + ' cycles',
            'simulated / estimated = ' + ratio(S.cycles, S.estimate_cycles)),
        accuracyCard(),
        expectedCard(),
        card('Peak live memory per tile', bytes(S.peak_live_bytes),
            pct(S.peak_live_bytes, T.tensor_bytes) + ' of the ' + num(T.tensor_bytes) + ' B code leaves at most (tile ' +
            S.peak_live_tile + '); highest buffer end ' + num(S.highest_end_bytes) + ' B (tile ' +
            S.highest_end_tile + ')'),
        card('GEMM work', num(S.gemm_macs) + ' MACs', floor > 0 ?
            'at AMP peak on every tile: ' + num(floor) + ' cycles, ' + pct(floor, S.cycles) +
            ' of the simulated cycles' : 'no GEMM'),
        card('Exchange', bytes(S.bytes_received) + ' received',
            num(S.transfers) + ' transfers, ' + num(S.pieces) + ' pieces, ' + bytes(S.bytes_sent) + ' sent'),
        card('Host time', 'compile ' + seconds(host.compile_seconds),
            'simulate ' + seconds(host.simulate_seconds))));
    var bc = columns(S.busy_columns);
    if (S.busiest_tiles.length) {
      b.appendChild(el('h3', {}, 'Busiest tiles (own kernel + exchange cycles)'));
      b.appendChild(table([
        {name: 'tile', value: function (r) { return r[bc.tile]; }, num: true},
        {name: 'busy', value: function (r) { return r[bc.busy]; }, num: true},
        {name: 'busy %', value: function (r) { return r[bc.busy]; }, text: function (r) { return pct(r[bc.busy], S.cycles); }, num: true},
        {name: 'compute', value: function (r) { return r[bc.compute]; }, num: true},
        {name: 'exchange', value: function (r) { return r[bc.exchange]; }, num: true},
        {name: 'calls', value: function (r) { return r[bc.calls]; }, num: true}
      ], S.busiest_tiles));
    }
  }

  // ------------------------------------------------------------ timeline

  var spanCols = columns(D.steps.span_columns);
  var stepOpCols = columns(D.steps.op_columns);

  function stepText(s) {
    var st = steps[s];
    var lines = ['superstep ' + s + ' "' + st[SC.label] + '": compute ' + num(st[SC.compute]) +
        ' cycles (slowest tile ' + st[SC.slowest_tile] + '), exchange ' + num(st[SC.exchange]) +
        (st[SC.exchange] > 0 ? ' (scheduled ' + num(st[SC.exchange_scheduled]) + ', endpoint bound ' +
        num(st[SC.exchange_bound]) + ', sync ' + num(st[SC.sync]) + ', busiest tile ' +
        st[SC.exchange_slowest_tile] + ')' : '') +
        (st[SC.update] > 0 ? ', after ' + num(st[SC.update]) + ' cycles of address updates' : '')];
    lines.push('ops in this superstep:');
    st[SC.ops].forEach(function (p) {
      lines.push('  ' + opName(p[stepOpCols.op]) + ': ' + num(p[stepOpCols.calls]) + ' kernel calls, ' +
          num(p[stepOpCols.transfers]) + ' transfers, ' + bytes(p[stepOpCols.bytes_received]) + ' received');
    });
    return lines.join('\n');
  }

  function renderTimeline() {
    var b = body('timeline');
    var n = steps.length;
    var from = el('input', {type: 'number', min: 0, max: Math.max(0, n - 1), value: 0});
    var to = el('input', {type: 'number', min: 0, max: Math.max(0, n - 1), value: Math.max(0, n - 1)});
    var holder = el('div', {class: 'wide'});
    b.appendChild(el('p', {class: 'note'}, 'Supersteps in order, as long as the simulator counts them: ' +
        'compute is the slowest tile\'s kernels (coloured by op; work hidden behind it is listed in the ' +
        'hover), exchange is the phase\'s sync plus its busiest tile\'s transfer time, split by op in ' +
        'proportion to the bytes each delivers. Ranges too long to draw are aggregated.'));
    b.appendChild(el('div', {class: 'controls'}, el('label', {}, 'supersteps'), from, el('label', {}, 'to'), to,
        el('button', {onclick: function () { from.value = 0; to.value = n - 1; draw(); }}, 'whole program')));
    b.appendChild(holder);
    // The ops that take the most cycles, in program order.
    var legend = el('div', {class: 'legend'}), shown = 40;
    var busy = ops.filter(function (o) { return simCycles(o) > 0; });
    var top = busy.slice().sort(function (p, q) { return simCycles(q) - simCycles(p); }).slice(0, shown);
    busy.forEach(function (o) {
      if (top.indexOf(o) >= 0) legend.appendChild(el('span', {}, swatch(o[OC.id]), opName(o[OC.id])));
    });
    if (busy.length > shown) legend.appendChild(el('span', {class: 'note'}, '(' + (busy.length - shown) + ' more ops: see the op table)'));
    b.appendChild(legend);
    b.appendChild(el('h3', {}, 'Cycles by op'));
    b.appendChild(opBar());
    b.appendChild(stepTable());
    from.addEventListener('change', draw);
    to.addEventListener('change', draw);
    function draw() {
      var a = Math.max(0, Math.min(n - 1, parseInt(from.value, 10) || 0));
      var z = Math.max(a, Math.min(n - 1, parseInt(to.value, 10) || 0));
      holder.textContent = '';
      if (n > 0) holder.appendChild(timelineSvg(a, z, widthOf(b, 1200)));
    }
    draw();
  }

  function stepEnd(s) {
    return steps[s][SC.start] + steps[s][SC.update] + steps[s][SC.compute] + steps[s][SC.exchange];
  }

  function timelineSvg(a, z, width) {
    var left = 90, lane = 26, top = 20;
    var start = steps[a][SC.start], end = stepEnd(z), span = Math.max(1, end - start);
    var plot = width - left - 10;
    var x = function (c) { return left + (c - start) / span * plot; };
    var g = svg('svg', {width: width, height: top + 2 * lane + 44, class: 'timeline'});
    g.appendChild(svg('text', {x: 0, y: top + 17, text: 'compute'}));
    g.appendChild(svg('text', {x: 0, y: top + lane + 17, text: 'exchange'}));
    var count = z - a + 1;
    var aggregate = count > plot / 3;
    if (aggregate) drawBuckets(g, a, z, x, top, lane, Math.max(1, Math.floor(plot / 3)));
    else for (var s = a; s <= z; ++s) drawStep(g, s, x, top, lane);
    // Axis: cycles at both ends, superstep numbers where they fit.
    var axisY = top + 2 * lane + 6;
    g.appendChild(svg('line', {x1: left, x2: left + plot, y1: axisY, y2: axisY, class: 'axis'}));
    g.appendChild(svg('text', {x: left, y: axisY + 14, text: num(start) + ' cycles'}));
    g.appendChild(svg('text', {x: left + plot, y: axisY + 14, 'text-anchor': 'end', text: num(end)}));
    var every = Math.max(1, Math.ceil(count / (plot / 40)));
    for (var t = a; t <= z; t += every) {
      g.appendChild(svg('text', {x: x(steps[t][SC.start]) + 2, y: axisY + 28, text: String(t)}));
    }
    g.appendChild(svg('text', {x: 0, y: axisY + 28, text: aggregate ? 'superstep ranges' : 'superstep'}));
    return g;
  }

  function drawStep(g, s, x, top, lane) {
    var st = steps[s];
    var at = st[SC.start] + st[SC.update];
    var text = stepText(s);
    st[SC.compute_spans].forEach(function (sp) {
      var op = sp[spanCols.op], c = sp[spanCols.cycles];
      var r = svg('rect', {x: x(at), y: top, width: Math.max(0.5, x(at + c) - x(at)), height: lane - 4,
        fill: opColor(op), class: 'span', 'data-op': op, 'data-step': s});
      hover(r, opName(op) + ': ' + sp[spanCols.kernel] + ', ' + num(sp[spanCols.calls]) +
          ' calls on the slowest tile, ' + num(c) + ' cycles\n\n' + text);
      g.appendChild(r);
      at += c;
    });
    if (st[SC.exchange] <= 0) return;
    var x0 = st[SC.start] + st[SC.update] + st[SC.compute];
    at = x0;
    st[SC.exchange_split].forEach(function (p) {
      var r = svg('rect', {x: x(at), y: top + lane, width: Math.max(0.5, x(at + p[1]) - x(at)),
        height: lane - 4, fill: opColor(p[0]), 'fill-opacity': 0.55, class: 'span exchange', 'data-op': p[0], 'data-step': s});
      hover(r, 'exchange of ' + opName(p[0]) + ': ' + num(p[1]) + ' cycles (by bytes delivered)\n\n' + text);
      g.appendChild(r);
      at += p[1];
    });
    var sync = Math.min(st[SC.sync], st[SC.exchange]);
    var r = svg('rect', {x: x(x0), y: top + lane, width: Math.max(0.5, x(x0 + sync) - x(x0)), height: 5, class: 'sync'});
    hover(r, 'sync: ' + num(st[SC.sync]) + ' cycles of the exchange phase\n\n' + text);
    g.appendChild(r);
  }

  // Too many supersteps for their own pixels: consecutive ranges of equal
  // count, each drawn over its real time with its compute by op, stacked.
  function drawBuckets(g, a, z, x, top, lane, buckets) {
    var per = Math.ceil((z - a + 1) / buckets);
    for (var b0 = a; b0 <= z; b0 += per) {
      var b1 = Math.min(z, b0 + per - 1);
      var compute = {}, exchange = {}, cTotal = 0, xTotal = 0;
      for (var s = b0; s <= b1; ++s) {
        steps[s][SC.compute_spans].forEach(function (sp) {
          compute[sp[spanCols.op]] = (compute[sp[spanCols.op]] || 0) + sp[spanCols.cycles];
        });
        steps[s][SC.exchange_split].forEach(function (p) { exchange[p[0]] = (exchange[p[0]] || 0) + p[1]; });
        cTotal += steps[s][SC.compute];
        xTotal += steps[s][SC.exchange];
      }
      var at = steps[b0][SC.start], end = stepEnd(b1), scale = (end - at) / Math.max(1, cTotal + xTotal);
      var label = 'supersteps ' + b0 + '-' + b1 + ': compute ' + num(cTotal) + ', exchange ' + num(xTotal) + ' cycles';
      var stack = function (parts, y, opacity, what) {
        var c = at;
        Object.keys(parts).map(Number).sort(function (p, q) { return parts[q] - parts[p]; }).forEach(function (op) {
          var w = parts[op] * scale;
          var r = svg('rect', {x: x(c), y: y, width: Math.max(0.5, x(c + w) - x(c)), height: lane - 4,
            fill: opColor(op), 'fill-opacity': opacity, class: 'span' + (what === 'exchange' ? ' exchange' : ''),
            'data-op': op});
          hover(r, opName(op) + ': ' + num(parts[op]) + ' ' + what + ' cycles in ' + label);
          g.appendChild(r);
          c += w;
        });
      };
      stack(compute, top, 1, 'compute');
      stack(exchange, top + lane, 0.55, 'exchange');
    }
  }

  function opBar() {
    var width = 900, total = Math.max(1, S.cycles), at = 0;
    var g = svg('svg', {width: width, height: 22});
    ops.slice().sort(function (p, q) { return simCycles(q) - simCycles(p); }).forEach(function (o) {
      var c = simCycles(o);
      if (c <= 0) return;
      var w = c / total * width;
      var r = svg('rect', {x: at, y: 2, width: Math.max(0.5, w), height: 18, fill: opColor(o[OC.id])});
      hover(r, opName(o[OC.id]) + ': ' + num(c) + ' cycles (' + pct(c, total) + '; compute ' +
          num(o[OC.compute]) + ', exchange ' + num(o[OC.exchange]) + ')');
      g.appendChild(r);
      at += w;
    });
    return g;
  }

  function stepTable() {
    var d = el('details', {}, el('summary', {}, 'Superstep table (' + num(steps.length) + ')'));
    var filled = false;
    d.addEventListener('toggle', function () {
      if (filled || !d.open) return;
      filled = true;
      var idx = steps.map(function (s, i) { return i; });
      d.appendChild(el('div', {class: 'scroll'}, table([
        {name: 'step', value: function (i) { return i; }, num: true},
        {name: 'label', value: function (i) { return steps[i][SC.label]; }},
        {name: 'start', value: function (i) { return steps[i][SC.start]; }, num: true},
        {name: 'compute', value: function (i) { return steps[i][SC.compute]; }, num: true},
        {name: 'exchange', value: function (i) { return steps[i][SC.exchange]; }, num: true},
        {name: 'slowest tile', value: function (i) { return steps[i][SC.slowest_tile]; }, num: true},
        {name: 'calls', value: function (i) { return steps[i][SC.calls]; }, num: true},
        {name: 'transfers', value: function (i) { return steps[i][SC.transfers]; }, num: true},
        {name: 'bytes received', value: function (i) { return steps[i][SC.bytes_received]; }, num: true},
        {name: 'ops', value: function (i) { return steps[i][SC.ops].length; },
          text: function (i) { return steps[i][SC.ops].map(function (p) { return p[0]; }).join(', '); }}
      ], idx, {limit: 2000})));
    });
    return d;
  }

  // ------------------------------------------------------------ ops

  function layerOf(name) {
    var m = /^(l\d+)\./.exec(name || '');
    return m ? m[1] : '(no layer)';
  }

  function renderOps() {
    var b = body('ops');
    var group = el('select', {}, el('option', {value: 'op'}, 'op'), el('option', {value: 'layer'}, 'layer'),
        el('option', {value: 'kind'}, 'kind'));
    var holder = el('div', {class: 'scroll'});
    b.appendChild(el('p', {class: 'note'}, 'Simulated cycles are attributed as the simulator does: a ' +
        'superstep\'s compute to the ops of its slowest tile, its exchange by bytes delivered. ' +
        'AMP % (kernel): the GEMM calls\' MACs over their own cycles at the target\'s AMP rate for the ' +
        'left operand\'s dtype (FP8 ' + T.amp_macs_fp8 + ', F16 ' + T.amp_macs_f16 + ', F32 ' + T.amp_macs_f32 +
        ' MACs per tile-cycle); AMP % (chip): the MACs over the op\'s simulated cycles on all ' + num(T.tiles) +
        ' tiles. Click an op id to see its decisions.'));
    b.appendChild(el('div', {class: 'controls'}, el('label', {}, 'group by'), group));
    b.appendChild(holder);
    group.addEventListener('change', draw);
    function draw() {
      holder.textContent = '';
      holder.appendChild(group.value === 'op' ? opTable() : groupTable(group.value));
    }
    draw();
  }

  function opTable() {
    var v = function (col) { return function (o) { return o[OC[col]]; }; };
    return table([
      {name: 'id', value: v('id'), num: true, text: function (o) {
        return el('span', {}, swatch(o[OC.id]), el('span', {class: 'op-link', onclick: function () {
          showDecisionsOf(o[OC.id]);
        }}, String(o[OC.id])));
      }},
      {name: 'name', value: v('name')},
      {name: 'kind', value: v('kind')},
      {name: 'owners', value: v('owners')},
      {name: 'recipe', value: v('recipe')},
      {name: 'est cycles', value: v('est_cycles'), num: true, title: 'the planner\'s estimate'},
      {name: 'sim cycles', value: simCycles, num: true},
      {name: 'sim / est', value: function (o) { return o[OC.est_cycles] > 0 ? simCycles(o) / o[OC.est_cycles] : -1; },
        text: function (o) { return ratio(simCycles(o), o[OC.est_cycles]); }, num: true},
      {name: 'compute', value: v('compute'), num: true},
      {name: 'exchange', value: v('exchange'), num: true},
      {name: 'share', value: simCycles, text: function (o) { return pct(simCycles(o), S.cycles); }, num: true},
      {name: 'calls', value: v('calls'), num: true},
      {name: 'tiles', value: v('compute_tiles'), num: true},
      {name: 'bytes received', value: v('bytes_received'), num: true},
      {name: 'MACs', value: v('macs'), num: true},
      {name: 'AMP % (kernel)', value: function (o) { var k = kernelAmp(o); return k === null ? -1 : k; },
        text: function (o) { var k = kernelAmp(o); return k === null ? '' : (100 * k).toFixed(1) + '%'; }, num: true},
      {name: 'AMP % (chip)', value: function (o) { var k = chipAmp(o); return k === null ? -1 : k; },
        text: function (o) { var k = chipAmp(o); return k === null ? '' : (100 * k).toFixed(1) + '%'; }, num: true},
      {name: 'supersteps', value: v('first_step'), text: function (o) {
        return o[OC.first_step] < 0 ? '' : o[OC.first_step] === o[OC.last_step] ? String(o[OC.first_step]) :
            o[OC.first_step] + '-' + o[OC.last_step];
      }, num: true}
    ], ops, {cls: 'ops-table'});
  }

  function groupTable(by) {
    var groups = {};
    ops.forEach(function (o) {
      var key = by === 'layer' ? layerOf(o[OC.name]) : o[OC.kind];
      var g = groups[key] || (groups[key] = {key: key, ops: 0, est: 0, compute: 0, exchange: 0, calls: 0,
        received: 0, macs: 0});
      g.ops += 1;
      g.est += o[OC.est_cycles];
      g.compute += o[OC.compute];
      g.exchange += o[OC.exchange];
      g.calls += o[OC.calls];
      g.received += o[OC.bytes_received];
      g.macs += o[OC.macs];
    });
    var rows = Object.keys(groups).map(function (k) { return groups[k]; });
    var v = function (f) { return function (g) { return g[f]; }; };
    return table([
      {name: by, value: v('key')},
      {name: 'ops', value: v('ops'), num: true},
      {name: 'est cycles', value: v('est'), num: true},
      {name: 'sim cycles', value: function (g) { return g.compute + g.exchange; }, num: true},
      {name: 'sim / est', value: function (g) { return g.est > 0 ? (g.compute + g.exchange) / g.est : -1; },
        text: function (g) { return ratio(g.compute + g.exchange, g.est); }, num: true},
      {name: 'compute', value: v('compute'), num: true},
      {name: 'exchange', value: v('exchange'), num: true},
      {name: 'share', value: function (g) { return g.compute + g.exchange; },
        text: function (g) { return pct(g.compute + g.exchange, S.cycles); }, num: true},
      {name: 'calls', value: v('calls'), num: true},
      {name: 'bytes received', value: v('received'), num: true},
      {name: 'MACs', value: v('macs'), num: true}
    ], rows, {sortCol: 3, desc: true, cls: 'group-table'});
  }

  // ------------------------------------------------------------ memory

  var M = D.memory;
  var BC = columns(M.buffer_columns);
  var detailTiles = {};
  M.tiles.forEach(function (t) { detailTiles[t.tile] = t; });
  var standardEnd = T.element_bytes * T.standard_elements;
  function elementOf(addr) {
    return addr < standardEnd ? Math.floor(addr / T.element_bytes) :
        T.standard_elements + Math.floor((addr - standardEnd) / T.interleaved_element_bytes);
  }

  function renderMemory() {
    var b = body('memory');
    var peak = tileMap(M.peak_live_map), peakStep = tileMap(M.peak_step_map), end = tileMap(M.highest_end_map);
    var code = tileMap(M.code_map), exchangeCode = tileMap(M.exchange_code_map);
    var busiest = M.tiles.length ? M.tiles.reduce(function (p, t) {
      return peak[t.tile] > peak[p.tile] ? t : p;
    }).tile : -1;
    var state = {tile: busiest, metric: 'peak'};
    var metric = el('select', {}, el('option', {value: 'peak'}, 'peak live bytes'),
        el('option', {value: 'end'}, 'highest buffer end'),
        el('option', {value: 'code'}, 'code (whole elements)'),
        el('option', {value: 'exchange'}, 'exchange-code bytes'));
    var scale = scaleSelect('0 to capacity');
    var tileSelect = el('select', {});
    M.tiles.forEach(function (t) {
      tileSelect.appendChild(el('option', {value: t.tile}, 'tile ' + t.tile + ' (' + bytes(peak[t.tile]) + ' peak)'));
    });
    tileSelect.value = String(state.tile);
    var gridHolder = el('div'), layoutHolder = el('div', {class: 'wide'}), message = el('p', {class: 'note'});
    b.appendChild(el('p', {class: 'note'}, 'Live bytes: buffers are live from the first superstep that ' +
        'names them to the last (inputs from the start, weights and outputs to the end); aliasing ' +
        'buffers count once. Each tile\'s code (the runtime\'s ' + num(T.runtime_code_bytes) + ' B, the ' +
        'program\'s own code and its exchange tables) takes whole standard elements from address 0; ' +
        'tensors have the rest of the ' + num(T.sram_bytes) + ' B SRAM, at most ' + num(T.tensor_bytes) +
        ' B. Outlined tiles have ' +
        'their buffers in this page (inspect-program --busiest-tiles, --tiles).'));
    b.appendChild(el('div', {class: 'controls'}, el('label', {}, 'heat map of'), metric,
        el('label', {}, 'scale'), scale, el('label', {}, 'tile'), tileSelect));
    b.appendChild(el('div', {class: 'cols'}, gridHolder, el('div', {}, message)));
    b.appendChild(layoutHolder);
    metric.addEventListener('change', function () { state.metric = metric.value; draw(); });
    scale.addEventListener('change', draw);
    tileSelect.addEventListener('change', function () { state.tile = parseInt(tileSelect.value, 10); draw(); });
    function pick(t) {
      if (!detailTiles[t]) {
        message.textContent = 'Tile ' + t + ': peak ' + bytes(peak[t]) + '; its buffers are not in this page ' +
            '(inspect-program --tiles=' + t + ' adds them).';
        return;
      }
      state.tile = t;
      tileSelect.value = String(t);
      draw();
    }
    function draw() {
      var values = {peak: peak, end: end, code: code, exchange: exchangeCode}[state.metric];
      gridHolder.textContent = '';
      var low = scale.value === 'zero' ? 0 : leastPositive(values);
      var high = scale.value === 'zero' ? T.sram_bytes : Math.max.apply(null, values);
      gridHolder.appendChild(tileGrid(values, low, high, {
        rank: scale.value === 'rank',
        detail: detailTiles, selected: state.tile, onclick: pick,
        label: function (t) {
          return 'tile ' + t + ': peak live ' + bytes(peak[t]) + ' (' + pct(peak[t], T.sram_bytes - code[t]) +
              ') in superstep ' + peakStep[t] + ', highest buffer end ' + bytes(end[t]) + '; code ' +
              bytes(code[t]) + ' with ' + bytes(exchangeCode[t]) + ' of exchange tables' +
              (detailTiles[t] ? '' : '\n(buffers not in this page)');
        }
      }));
      gridHolder.appendChild(el('div', {}, heatLegend(bytes(low), (scale.value === 'zero' ? 'capacity ' : 'most ') +
          bytes(high) + (scale.value === 'rank' ? ' (by rank)' : ''))));
      layoutHolder.textContent = '';
      message.textContent = '';
      if (state.tile >= 0 && detailTiles[state.tile]) {
        layoutHolder.appendChild(el('h3', {}, 'Tile ' + state.tile + ': buffers by address over supersteps'));
        layoutHolder.appendChild(bufferLayout(detailTiles[state.tile], code[state.tile], widthOf(b, 1200)));
        layoutHolder.appendChild(bufferTable(detailTiles[state.tile]));
      }
    }
    draw();
  }

  function flagText(f) {
    var parts = [];
    if (f & M.flags.host_written) parts.push('host writes it');
    if (f & M.flags.weight) parts.push('weight (resident)');
    if (f & M.flags.host_read) parts.push('host reads it');
    return parts.join(', ');
  }

  function bufferLayout(tile, codeEnd, width) {
    var n = Math.max(1, D.summary.supersteps);
    var left = 70, right = 10, top = 10, height = 440, liveH = 90;
    var plot = width - left - right;
    var x = function (s) { return left + s / n * plot; };
    var y = function (addr) { return top + height - addr / T.sram_bytes * height; };
    var g = svg('svg', {width: width, height: top + height + liveH + 50, class: 'buffer-layout'});
    // Interleaved memory shaded; element boundaries as lines.
    g.appendChild(svg('rect', {x: left, y: y(T.sram_bytes), width: plot, height: y(standardEnd) - y(T.sram_bytes),
      fill: '#f1ebfa'}));
    g.appendChild(svg('rect', {x: left, y: y(codeEnd), width: plot, height: y(0) - y(codeEnd), fill: '#e4e7ec'}));
    g.appendChild(svg('text', {x: left + plot - 4, y: y(codeEnd) + 12, 'text-anchor': 'end',
      text: 'code and exchange tables (' + bytes(codeEnd) + ')'}));
    g.appendChild(svg('text', {x: left + plot - 4, y: y(T.sram_bytes) + 12, 'text-anchor': 'end',
      text: 'interleaved memory (elements of ' + bytes(T.interleaved_element_bytes) + ')'}));
    g.appendChild(svg('text', {x: left + plot - 4, y: y(standardEnd) + 12, 'text-anchor': 'end',
      text: 'standard memory (elements of ' + bytes(T.element_bytes) + ')'}));
    var bounds = [];
    for (var e = 0; e <= T.standard_elements; ++e) bounds.push(e * T.element_bytes);
    for (var a = standardEnd + T.interleaved_element_bytes; a < T.sram_bytes; a += T.interleaved_element_bytes) bounds.push(a);
    bounds.push(T.sram_bytes);
    var lastLabel = 1e9;
    bounds.forEach(function (addr) {
      g.appendChild(svg('line', {x1: left, x2: left + plot, y1: y(addr), y2: y(addr),
        class: addr > standardEnd ? 'grid-il' : 'grid'}));
      if (lastLabel - y(addr) >= 12 || addr === 0) {
        g.appendChild(svg('text', {x: left - 4, y: y(addr) + 4, 'text-anchor': 'end',
          text: addr === T.sram_bytes ? bytes(addr) : 'e' + elementOf(addr) + ' ' + Math.round(addr / 1024) + 'K'}));
        lastLabel = y(addr);
      }
    });
    tile.buffers.forEach(function (bf) {
      var off = bf[BC.offset], size = bf[BC.bytes], op = bf[BC.op];
      var y0 = y(off + size), h = Math.max(1, y(off) - y0);
      var r = svg('rect', {x: x(bf[BC.first]), y: y0, width: Math.max(1, x(bf[BC.last] + 1) - x(bf[BC.first])),
        height: h, fill: op >= 0 ? opColor(op) : '#9aa3b2', 'fill-opacity': 0.85, class: 'buffer',
        'data-buffer': bf[BC.id]});
      hover(r, '#' + bf[BC.id] + ' ' + bf[BC.name] + '\n' + num(size) + ' B at [' + num(off) + ', ' + num(off + size) +
          '), memory element' + (elementOf(off) === elementOf(off + size - 1) ? ' ' + elementOf(off) :
          's ' + elementOf(off) + '-' + elementOf(off + size - 1)) + '\nlive in supersteps ' + bf[BC.first] + '-' +
          bf[BC.last] + '\n' + (op >= 0 ? 'allocated by ' + opName(op) : 'no op') +
          (bf[BC.value] >= 0 ? ', value %' + bf[BC.value] : ', scratch') +
          (bf[BC.flags] ? '\n' + flagText(bf[BC.flags]) : ''));
      g.appendChild(r);
    });
    g.appendChild(svg('line', {x1: left, x2: left, y1: top, y2: top + height, class: 'axis'}));
    // Live bytes per superstep, against the capacity.
    var ly = top + height + 20, peak = Math.max.apply(null, tile.live.concat([1]));
    var yl = function (v) { return ly + liveH - v / T.tensor_bytes * liveH; };
    g.appendChild(svg('rect', {x: left, y: ly, width: plot, height: liveH, fill: 'none', class: 'axis'}));
    var path = '';
    tile.live.forEach(function (v, s) {
      path += (s ? 'L' : 'M') + x(s).toFixed(1) + ',' + yl(v).toFixed(1) + 'L' + x(s + 1).toFixed(1) + ',' + yl(v).toFixed(1);
    });
    if (path) g.appendChild(svg('path', {d: path, fill: 'none', stroke: '#2a5bd7', 'stroke-width': 1.5}));
    g.appendChild(svg('text', {x: 0, y: ly + 12, text: 'live bytes'}));
    g.appendChild(svg('text', {x: 0, y: ly + 26, text: 'peak ' + bytes(peak)}));
    g.appendChild(svg('text', {x: 0, y: ly + liveH + 16, text: 'superstep'}));
    var every = Math.max(1, Math.ceil(n / (plot / 40)));
    for (var s = 0; s < n; s += every) {
      g.appendChild(svg('text', {x: (x(s) + x(s + 1)) / 2, y: ly + liveH + 16, 'text-anchor': 'middle', text: String(s)}));
    }
    tile.live.forEach(function (v, s) {
      var r = svg('rect', {x: x(s), y: ly, width: Math.max(1, x(s + 1) - x(s)), height: liveH, fill: 'transparent'});
      hover(r, 'superstep ' + s + ': ' + num(v) + ' B live (' + pct(v, T.tensor_bytes) + ' of the tile)');
      g.appendChild(r);
    });
    return g;
  }

  function bufferTable(tile) {
    var d = el('details', {}, el('summary', {}, 'Buffers of tile ' + tile.tile + ' (' + tile.buffers.length + ')'));
    var v = function (c) { return function (r) { return r[BC[c]]; }; };
    d.appendChild(el('div', {class: 'scroll'}, table([
      {name: 'buffer', value: v('id'), num: true},
      {name: 'offset', value: v('offset'), num: true},
      {name: 'bytes', value: v('bytes'), num: true},
      {name: 'elements', value: v('offset'), text: function (r) {
        return elementOf(r[BC.offset]) + '-' + elementOf(r[BC.offset] + r[BC.bytes] - 1);
      }},
      {name: 'supersteps', value: v('first'), text: function (r) { return r[BC.first] + '-' + r[BC.last]; }},
      {name: 'op', value: v('op'), num: true},
      {name: 'name', value: v('name')},
      {name: 'notes', value: function (r) { return flagText(r[BC.flags]); }}
    ], tile.buffers, {sortCol: 1})));
    return d;
  }

  // ------------------------------------------------------------ exchange

  var X = D.exchange;
  var XC = columns(X.step_op_columns);
  var TC = columns(X.transfer_columns);

  function renderExchange() {
    var b = body('exchange');
    var select = el('select', {}, el('option', {value: 'all'}, 'whole program'));
    steps.forEach(function (st, s) {
      if (st[SC.transfers] > 0) {
        select.appendChild(el('option', {value: 'step:' + s}, 'superstep ' + s + ' "' + st[SC.label] + '"'));
      }
    });
    X.op_received.forEach(function (p) { select.appendChild(el('option', {value: 'op:' + p[0]}, opName(p[0]))); });
    var metric = el('select', {}, el('option', {value: 'received'}, 'bytes received'),
        el('option', {value: 'fragments'}, 'fragments'), el('option', {value: 'sent'}, 'bytes sent'));
    var scale = scaleSelect('0 to most loaded tile');
    var holder = el('div');
    b.appendChild(el('p', {class: 'note'}, 'A multicast is paid once by its sender and by every receiver; ' +
        'each piece of a transfer is a fragment at both ends (' + T.sync_cycles + ' sync cycles per phase, ' +
        'then the busiest tile\'s largest of bytes sent / 4, bytes received / 4 and 2 cycles per fragment). ' +
        'Click a bar to pick its superstep.'));
    b.appendChild(el('div', {class: 'controls'}, el('label', {}, 'show'), select, el('label', {}, 'per tile'), metric,
        el('label', {}, 'scale'), scale));
    b.appendChild(stepBars(function (s) { select.value = 'step:' + s; draw(); }));
    b.appendChild(holder);
    select.addEventListener('change', draw);
    metric.addEventListener('change', draw);
    scale.addEventListener('change', draw);
    function draw() {
      holder.textContent = '';
      var sel = select.value.split(':');
      var kind = sel[0], id = sel.length > 1 ? parseInt(sel[1], 10) : -1;
      document.querySelectorAll('#exchange rect.bar').forEach(function (r) {
        r.setAttribute('class', 'bar hot' + (kind === 'step' && Number(r.getAttribute('data-step')) === id ? ' selected' : ''));
      });
      var values = null, what = metric.value;
      if (kind === 'all') {
        values = tileMap(what === 'received' ? X.received_map : what === 'sent' ? X.sent_map : X.fragments_map);
      } else if (kind === 'step') {
        if (what === 'sent') what = 'received';
        values = tileMap(what === 'received' ? steps[id][SC.received_map] : steps[id][SC.fragments_map]);
      } else {
        what = 'received';
        X.op_received.forEach(function (p) { if (p[0] === id) values = tileMap(p[1]); });
      }
      if (what !== metric.value) metric.value = what;
      if (!values) values = new Array(T.tiles).fill(0);
      var max = Math.max.apply(null, values.concat([0]));
      var busiest = values.indexOf(max), total = values.reduce(function (p, v) { return p + v; }, 0);
      var unit = what === 'fragments' ? function (v) { return num(v) + ' fragments'; } : bytes;
      holder.appendChild(el('h3', {}, select.options[select.selectedIndex].text + ': ' + what + ' per tile'));
      holder.appendChild(el('p', {class: 'note'}, 'total ' + unit(total) + '; busiest tile ' + busiest + ' with ' +
          unit(max) + '; ' + values.filter(function (v) { return v > 0; }).length + ' of ' + T.tiles + ' tiles'));
      var low = scale.value === 'zero' ? 0 : leastPositive(values);
      holder.appendChild(el('div', {class: 'cols'}, el('div', {}, tileGrid(values, low, max, {
        rank: scale.value === 'rank',
        label: function (t) { return 'tile ' + t + ': ' + unit(values[t]); }
      }), el('div', {}, heatLegend(unit(low), 'most ' + unit(max) + (scale.value === 'rank' ? ' (by rank)' : '')))),
      el('div', {}, opExchangeTable(kind, id), largestTable(kind, id))));
    }
    draw();
  }

  function stepBars(onpick) {
    var width = 900, height = 70, n = Math.max(1, steps.length);
    var most = Math.max.apply(null, steps.map(function (s) { return s[SC.exchange]; }).concat([1]));
    var g = svg('svg', {width: width + 60, height: height + 18});
    g.appendChild(svg('text', {x: 0, y: 12, text: 'exchange cycles per superstep (most ' + num(most) + ')'}));
    var w = width / n;
    steps.forEach(function (st, s) {
      if (st[SC.exchange] <= 0) return;
      var h = Math.max(1, st[SC.exchange] / most * (height - 20));
      var r = svg('rect', {x: s * w, y: height - h, width: Math.max(1, w - (w > 4 ? 1 : 0)), height: h,
        class: 'bar hot', 'data-step': s, onclick: function () { onpick(s); }});
      hover(r, 'superstep ' + s + ' "' + st[SC.label] + '": ' + num(st[SC.exchange]) + ' exchange cycles, ' +
          num(st[SC.transfers]) + ' transfers, ' + num(st[SC.pieces]) + ' pieces, ' + num(st[SC.fragments]) +
          ' fragments, ' + bytes(st[SC.bytes_received]) + ' received');
      g.appendChild(r);
    });
    g.appendChild(svg('line', {x1: 0, x2: width, y1: height, y2: height, class: 'axis'}));
    return g;
  }

  function inSelection(kind, id, step, op) {
    return kind === 'all' || (kind === 'step' && step === id) || (kind === 'op' && op === id);
  }

  function opExchangeTable(kind, id) {
    var byOp = {};
    X.step_ops.forEach(function (r) {
      if (!inSelection(kind, id, r[XC.step], r[XC.op])) return;
      var o = byOp[r[XC.op]] || (byOp[r[XC.op]] = {op: r[XC.op], transfers: 0, pieces: 0, fragments: 0, sent: 0,
        received: 0, steps: 0, dtypes: {}});
      o.transfers += r[XC.transfers];
      o.pieces += r[XC.pieces];
      o.fragments += r[XC.fragments];
      o.sent += r[XC.bytes_sent];
      o.received += r[XC.bytes_received];
      o.steps += 1;
      r[XC.dtypes].split(',').forEach(function (d) { o.dtypes[d] = 1; });
    });
    var rows = Object.keys(byOp).map(function (k) { return byOp[k]; });
    var v = function (f) { return function (o) { return o[f]; }; };
    return el('div', {}, el('h3', {}, 'By op'), table([
      {name: 'op', value: v('op'), text: function (o) { return el('span', {}, swatch(o.op), opName(o.op)); }},
      {name: 'supersteps', value: v('steps'), num: true},
      {name: 'transfers', value: v('transfers'), num: true},
      {name: 'pieces', value: v('pieces'), num: true},
      {name: 'fragments', value: v('fragments'), num: true},
      {name: 'bytes sent', value: v('sent'), num: true},
      {name: 'bytes received', value: v('received'), num: true},
      {name: 'dtypes', value: function (o) { return Object.keys(o.dtypes).sort().join(','); }}
    ], rows, {sortCol: 6, desc: true, cls: 'exchange-ops'}));
  }

  function largestTable(kind, id) {
    var rows = X.largest.filter(function (r) { return inSelection(kind, id, r[TC.step], r[TC.op]); });
    var size = function (r) { return r[TC.bytes] * r[TC.rows]; };
    return el('div', {}, el('h3', {}, 'Largest transfers'), table([
      {name: 'superstep', value: function (r) { return r[TC.step]; }, num: true},
      {name: 'op', value: function (r) { return r[TC.op]; }, num: true},
      {name: 'from tile', value: function (r) { return r[TC.src_tile]; }, num: true},
      {name: 'buffer', value: function (r) { return r[TC.src_buffer]; }, num: true},
      {name: 'bytes', value: size, num: true, text: function (r) {
        return r[TC.rows] > 1 ? num(r[TC.rows]) + ' x ' + num(r[TC.bytes]) + ' = ' + num(size(r)) : num(size(r));
      }},
      {name: 'dtype', value: function (r) { return r[TC.dtype]; }},
      {name: 'destinations', value: function (r) { return r[TC.destinations]; }, num: true},
      {name: 'to tiles', value: function (r) { return r[TC.destination_tiles]; }, text: function (r) {
        var t = r[TC.destination_tiles];
        return t.length <= 60 ? t : el('span', {title: t}, t.slice(0, t.lastIndexOf(',', 60)) + ', ...');
      }}
    ], rows, {sortCol: 4, desc: true, limit: 20, cls: 'largest'}),
    el('p', {class: 'note'}, 'The page keeps the largest few transfers of each superstep and op ' +
        '(inspect-program --largest).'));
  }

  // ------------------------------------------------------------ decisions

  var DC = columns(D.passes.decision_columns);
  var decisionFilter = null;

  function showDecisionsOf(op) {
    if (decisionFilter) {
      decisionFilter.value = String(op);
      decisionFilter.dispatchEvent(new Event('input'));
    }
    document.getElementById('decisions').scrollIntoView();
  }

  function renderDecisions() {
    var b = body('decisions');
    var all = [];
    D.passes.runs.forEach(function (run, r) {
      run.decisions.forEach(function (d, i) { all.push({run: r, index: i, d: d}); });
    });
    var opInput = el('input', {type: 'text', placeholder: 'e.g. 4 or 1,4', size: 12});
    decisionFilter = opInput;
    var pass = el('select', {}, el('option', {value: '-1'}, 'every pass'));
    D.passes.runs.forEach(function (run, r) {
      pass.appendChild(el('option', {value: r}, run.pass + ' (' + run.decisions.length + ')'));
    });
    var outcome = el('select', {}, el('option', {value: ''}, 'any outcome'),
        el('option', {value: 'Accepted'}, 'accepted'), el('option', {value: 'Rejected'}, 'rejected'),
        el('option', {value: 'Info'}, 'info'));
    var search = el('input', {type: 'text', placeholder: 'text in action or reason', size: 24});
    var holder = el('div', {class: 'scroll'}), count = el('p', {class: 'note'});
    var runs = el('ul', {});
    D.passes.runs.forEach(function (run) {
      var n = {Accepted: 0, Rejected: 0, Info: 0};
      run.decisions.forEach(function (d) { n[d[DC.outcome]] = (n[d[DC.outcome]] || 0) + 1; });
      runs.appendChild(el('li', {}, run.pass + (run.flags.length ? ' ' + run.flags.join(' ') : '') + ': ' +
          run.decisions.length + ' decisions (' + n.Accepted + ' accepted, ' + n.Rejected + ' rejected, ' +
          n.Info + ' info)'));
    });
    b.appendChild(runs);
    b.appendChild(el('div', {class: 'controls'}, el('label', {}, 'op ids'), opInput, pass, outcome, search));
    b.appendChild(count);
    b.appendChild(holder);
    [opInput, search].forEach(function (i) { i.addEventListener('input', draw); });
    [pass, outcome].forEach(function (i) { i.addEventListener('change', draw); });
    function draw() {
      var wanted = opInput.value.split(/[\s,]+/).filter(function (s) { return s !== ''; }).map(Number);
      var p = parseInt(pass.value, 10), text = search.value.toLowerCase();
      var rows = all.filter(function (x) {
        if (p >= 0 && x.run !== p) return false;
        if (outcome.value && x.d[DC.outcome] !== outcome.value) return false;
        if (wanted.length && !x.d[DC.ops].some(function (o) { return wanted.indexOf(o) >= 0; })) return false;
        if (text && (x.d[DC.action] + ' ' + x.d[DC.reason]).toLowerCase().indexOf(text) < 0) return false;
        return true;
      });
      count.textContent = num(rows.length) + ' of ' + num(all.length) + ' decisions';
      holder.textContent = '';
      var delta = function (a, z) { return z - a; };
      holder.appendChild(table([
        {name: 'pass', value: function (x) { return x.run; }, cls: 'nowrap',
          text: function (x) { return D.passes.runs[x.run].pass; }},
        {name: '#', value: function (x) { return x.index; }, num: true},
        {name: 'outcome', value: function (x) { return x.d[DC.outcome]; }, text: function (x) {
          return el('span', {class: 'outcome-' + x.d[DC.outcome].toLowerCase()}, x.d[DC.outcome].toLowerCase());
        }},
        {name: 'ops', value: function (x) { return x.d[DC.ops].join(','); }},
        {name: 'action', value: function (x) { return x.d[DC.action]; }},
        {name: 'reason', value: function (x) { return x.d[DC.reason]; }},
        {name: 'cycles before', value: function (x) { return x.d[DC.cycles_before]; }, num: true},
        {name: 'cycles after', value: function (x) { return x.d[DC.cycles_after]; }, num: true},
        {name: 'change', value: function (x) { return delta(x.d[DC.cycles_before], x.d[DC.cycles_after]); }, num: true,
          text: function (x) { var c = delta(x.d[DC.cycles_before], x.d[DC.cycles_after]); return (c > 0 ? '+' : '') + num(c); }},
        {name: 'bytes before', value: function (x) { return x.d[DC.bytes_before]; }, num: true},
        {name: 'bytes after', value: function (x) { return x.d[DC.bytes_after]; }, num: true}
      ], rows, {limit: 1000, cls: 'decisions-table'}));
    }
    draw();
  }

  // ------------------------------------------------------------ page

  document.getElementById('title').textContent = 'tilec report: ' +
      (D.module.model ? D.module.model.split(' weight_seed')[0] : D.module.name) + ' on ' + T.name;
  document.title = 'tilec report: ' + D.module.name;
  // How long each section took to draw, for whoever measures the page.
  var started = performance.now(), times = [];
  [['summary', renderSummary], ['timeline', renderTimeline], ['ops', renderOps], ['memory', renderMemory],
    ['exchange', renderExchange], ['decisions', renderDecisions]].forEach(function (s) {
    var t = performance.now();
    s[1]();
    times.push(s[0] + ' ' + Math.round(performance.now() - t));
  });
  document.body.setAttribute('data-render-ms', Math.round(performance.now() - started));
  document.body.setAttribute('data-section-ms', times.join(', '));
  document.body.setAttribute('data-status', 'ready');
})();
