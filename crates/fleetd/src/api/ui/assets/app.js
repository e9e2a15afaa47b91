// fleet's cluster page: follows the server-sent events at ./events and rewrites the board in place; the page is
// never reloaded. Registry text reaches the DOM only as textContent or attribute values; the detail panel is HTML
// the server rendered with everything escaped. For the admin role (the server then puts its action token in a
// <meta name="fleet-token">) it offers the actions: each opens a dialog with the server's preview (./preview, what
// `fleetctl plan` prints) and, on "confirm", sends the API request that preview names with the token header.
(function () {
  'use strict';

  // Set once per page load: a reload would replace it (the browser test checks that it survives updates).
  window.fleetPageLoad = String(Date.now()) + '-' + String(Math.random()).slice(2);

  var table = document.getElementById('board');
  var statusLine = document.getElementById('status');
  var revisionLine = document.getElementById('revision');
  var detail = document.getElementById('detail');
  var machines = [];
  var rows = new Map();
  var rowElements = new Map();
  var openUnit = null;
  var tokenMeta = document.querySelector('meta[name="fleet-token"]');
  var token = tokenMeta ? tokenMeta.content : null;
  var rolloutsTable = document.getElementById('rollouts');
  var dialog = document.getElementById('confirm');
  var pending = null; // the write the open dialog would send

  function element(tag, className, text) {
    var e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // The same fixed mapping as the server's render::state_class.
  function stateClass(active) {
    switch (active) {
      case 'active': return 's-active';
      case 'activating': case 'reloading': return 's-activating';
      case 'deactivating': return 's-deactivating';
      case 'failed': return 's-failed';
      case 'inactive': return 's-inactive';
      case 'scheduled': return 's-scheduled';
      default: return 's-other';
    }
  }

  // The same fixed mapping as the server's render::health_class.
  function healthClass(status) {
    switch (status) {
      case 'healthy': return 'h-healthy';
      case 'unhealthy': return 'h-unhealthy';
      default: return 'h-unknown';
    }
  }

  function cellText(cell) {
    return cell.sub ? cell.active + '/' + cell.sub : cell.active;
  }

  function short(hash) {
    return hash ? hash.slice(0, 7) : '';
  }

  // The same fixed mapping as the server's render::action_label.
  function actionLabel(action) {
    return action === 'rollback' ? 'roll back' : action;
  }

  // The same fixed mappings as the server's render::rollout_class and phase_class.
  function rolloutClass(state) {
    switch (state) {
      case 'running': return 'r-running';
      case 'paused': return 'r-paused';
      case 'done': return 'r-done';
      case 'aborted': case 'rolled_back': return 'r-ended';
      default: return 'r-other';
    }
  }

  function phaseClass(phase) {
    return ['pending', 'updating', 'healthy', 'done', 'failed', 'skipped'].indexOf(phase) >= 0 ? phase : 'other';
  }

  function actionButton(action, subject) {
    var b = element('button', 'act', actionLabel(action));
    b.type = 'button';
    b.dataset.action = action;
    b.dataset.subject = subject;
    return b;
  }

  function stepsTable(steps, caption) {
    var t = element('table', 'steps');
    if (caption) t.appendChild(element('caption', '', caption));
    steps.forEach(function (s) {
      var tr = element('tr');
      tr.dataset.machine = s.machine;
      var place = s.from ? s.from.slice(0, 8) + ' → ' + s.machine.slice(0, 8) : s.machine.slice(0, 8);
      var mid = element('td', 'mid', place);
      mid.title = s.machine;
      tr.appendChild(mid);
      tr.appendChild(element('td', '', s.unit));
      tr.appendChild(element('td', 'phase p-' + phaseClass(s.phase), s.phase));
      var health = element('td');
      if (s.health) health.appendChild(element('span', 'health ' + healthClass(s.health.status), s.health.status));
      tr.appendChild(health);
      tr.appendChild(element('td', 'detail', s.detail || ''));
      t.appendChild(tr);
    });
    return t;
  }

  function renderRollouts(list) {
    var tbody = element('tbody');
    list.forEach(function (r) {
      var tr = element('tr');
      tr.dataset.rollout = r.id;
      tr.appendChild(element('td', 'id', r.id));
      tr.appendChild(element('td', 'kind', r.kind));
      tr.appendChild(element('td', 'units', r.units.join(' ')));
      var state = element('td', 'rstate ' + rolloutClass(r.state));
      state.appendChild(element('span', 'state', r.state));
      [r.reason, r.error].forEach(function (why) { if (why) state.appendChild(element('div', 'reason', why)); });
      tr.appendChild(state);
      var steps = element('td');
      if (r.steps.length) steps.appendChild(stepsTable(r.steps, ''));
      if (r.undo && r.undo.length) steps.appendChild(stepsTable(r.undo, 'undo'));
      tr.appendChild(steps);
      if (token) {
        var actions = element('td', 'actions');
        r.actions.forEach(function (action) {
          actions.appendChild(actionButton(action, action === 'rollback' ? (r.units[0] || '') : r.id));
        });
        tr.appendChild(actions);
      }
      tbody.appendChild(tr);
    });
    rolloutsTable.replaceChild(tbody, rolloutsTable.tBodies[0]);
    var note = document.getElementById('no-rollouts');
    if (list.length === 0 && !note) {
      note = element('p', 'note', 'No rollouts.');
      note.id = 'no-rollouts';
      rolloutsTable.after(note);
    } else if (list.length > 0 && note) {
      note.remove();
    }
  }

  function header() {
    var tr = element('tr');
    ['unit', 'desired', 'current'].forEach(function (title) { tr.appendChild(element('th', '', title)); });
    machines.forEach(function (m) {
      var th = element('th', m.cordoned ? 'machine cordoned' : 'machine');
      th.dataset.machine = m.id;
      th.title = m.id + (m.cordoned ? ' (cordoned: takes no new unit)' : '');
      th.appendChild(element('div', 'mid', m.short));
      th.appendChild(element('div', 'ip', m.ip));
      if (m.cordoned) {
        th.appendChild(element('div', 'badge', 'cordoned'));
      }
      Object.keys(m.metadata).sort().forEach(function (key) {
        th.appendChild(element('div', 'meta', key + '=' + m.metadata[key]));
      });
      if (token) {
        var actions = element('div', 'actions');
        actions.appendChild(actionButton(m.cordoned ? 'uncordon' : 'cordon', m.id));
        actions.appendChild(actionButton('drain', m.id));
        th.appendChild(actions);
      }
      tr.appendChild(th);
    });
    var thead = element('thead');
    thead.appendChild(tr);
    return thead;
  }

  function rowElement(row) {
    var tr = element('tr');
    tr.dataset.unit = row.name;
    var th = element('th');
    var link = element('a', 'unit', row.name);
    link.href = 'units/' + encodeURIComponent(row.name);
    th.appendChild(link);
    tr.appendChild(th);
    tr.appendChild(element('td', 'desired', row.desired));
    tr.appendChild(element('td', 'current', row.current));
    machines.forEach(function (m) {
      var cell = row.cells[m.id];
      var td = element('td', 'cell');
      td.dataset.machine = m.id;
      if (cell) {
        td.classList.add(stateClass(cell.active));
        if (cell.target) td.classList.add('target');
        if (cell.hash && cell.hash !== cell.intended) td.classList.add('outdated');
        td.textContent = cellText(cell);
        td.title = 'load ' + (cell.load || '-') + (cell.hash ? ', file ' + short(cell.hash) : '') +
          (cell.running ? ', running ' + short(cell.running) : '');
        if (cell.health) {
          // Units with a health check only: the plain cell text stays as it was for every other unit.
          td.appendChild(document.createTextNode(' '));
          td.appendChild(element('span', 'health ' + healthClass(cell.health.status), cell.health.status));
          td.title += ', health ' + cell.health.status + (cell.health.output ? ': ' + cell.health.output : '');
        }
      }
      tr.appendChild(td);
    });
    return tr;
  }

  function renderAll() {
    var tbody = element('tbody');
    rowElements.clear();
    Array.from(rows.keys()).sort().forEach(function (name) {
      var tr = rowElement(rows.get(name));
      rowElements.set(name, tr);
      tbody.appendChild(tr);
    });
    table.replaceChildren(header(), tbody);
    showEmpty();
  }

  function showEmpty() {
    var note = document.getElementById('empty');
    if (rows.size === 0 && !note) {
      note = element('p', 'note', 'No units.');
      note.id = 'empty';
      table.after(note);
    } else if (rows.size > 0 && note) {
      note.remove();
    }
  }

  function putRow(row) {
    rows.set(row.name, row);
    var tr = rowElement(row);
    var existing = rowElements.get(row.name);
    rowElements.set(row.name, tr);
    if (existing) {
      existing.replaceWith(tr);
      return;
    }
    var tbody = table.tBodies[0];
    var after = null;
    for (var i = 0; i < tbody.rows.length; i++) {
      if (tbody.rows[i].dataset.unit > row.name) { after = tbody.rows[i]; break; }
    }
    tbody.insertBefore(tr, after);
  }

  function removeRow(name) {
    rows.delete(name);
    var tr = rowElements.get(name);
    if (tr) tr.remove();
    rowElements.delete(name);
  }

  function showState(view) {
    revisionLine.textContent = 'revision ' + view.revision;
    statusLine.textContent = view.connected
      ? 'live · ' + rows.size + ' units · ' + machines.length + ' machines'
      : 'live, but this fleetd has lost etcd: showing the last state it saw';
    statusLine.className = view.connected ? 'status live' : 'status stale';
  }

  function loadDetail(name) {
    openUnit = name;
    fetch('units/' + encodeURIComponent(name) + '?fragment', { cache: 'no-store' })
      .then(function (response) {
        return response.text().then(function (text) { return { ok: response.ok, text: text }; });
      })
      .then(function (answer) {
        if (openUnit !== name) return;
        if (answer.ok) {
          detail.innerHTML = answer.text; // server-rendered, every registry value escaped
        } else {
          detail.replaceChildren(element('p', 'note', name + ': ' + answer.text));
        }
        var close = element('button', 'close', '×');
        close.type = 'button';
        close.title = 'close';
        close.addEventListener('click', function () { openUnit = null; detail.hidden = true; });
        detail.prepend(close);
        detail.hidden = false;
      })
      .catch(function (err) { detail.replaceChildren(element('p', 'note', String(err))); detail.hidden = false; });
  }

  table.addEventListener('click', function (event) {
    var link = event.target.closest('a.unit');
    if (!link) return;
    event.preventDefault();
    loadDetail(link.closest('tr').dataset.unit);
  });

  function answerText(response) {
    return response.text().then(function (text) {
      try { return JSON.parse(text).error.message || text; } catch (e) { return text || String(response.status); }
    });
  }

  // Asks the server what the action would change, and shows it; nothing is written before "confirm".
  function confirmAction(action, subject) {
    pending = null;
    var title = document.getElementById('confirm-title');
    var summary = document.getElementById('confirm-summary');
    var changes = document.getElementById('confirm-changes');
    var error = document.getElementById('confirm-error');
    var ok = document.getElementById('confirm-ok');
    title.textContent = actionLabel(action) + ' ' + subject;
    summary.replaceChildren(element('li', 'note', 'computing the plan…'));
    changes.replaceChildren();
    error.textContent = '';
    ok.disabled = true;
    if (!dialog.open) dialog.showModal();
    var query = 'preview?action=' + encodeURIComponent(action) + '&subject=' + encodeURIComponent(subject);
    fetch(query, { cache: 'no-store' }).then(function (response) {
      if (!response.ok) return answerText(response).then(function (text) { throw new Error(text); });
      return response.json();
    }).then(function (preview) {
      title.textContent = preview.title;
      summary.replaceChildren();
      preview.summary.forEach(function (line) { summary.appendChild(element('li', '', line)); });
      var head = element('tr');
      ['unit', 'machine', 'action', 'detail'].forEach(function (h) { head.appendChild(element('th', '', h)); });
      changes.appendChild(head);
      preview.changes.forEach(function (c) {
        var tr = element('tr');
        tr.appendChild(element('td', '', c.unit));
        tr.appendChild(element('td', 'mid', c.machine ? c.machine.slice(0, 8) : '-'));
        tr.appendChild(element('td', 'action', c.action));
        tr.appendChild(element('td', '', c.detail));
        changes.appendChild(tr);
      });
      changes.hidden = preview.changes.length === 0;
      pending = preview.write;
      ok.disabled = false;
    }).catch(function (err) {
      summary.replaceChildren();
      error.textContent = 'cannot ' + actionLabel(action) + ': ' + err.message;
    });
  }

  function send() {
    if (!pending) return;
    var write = pending;
    var error = document.getElementById('confirm-error');
    var ok = document.getElementById('confirm-ok');
    ok.disabled = true;
    var init = { method: write.method, headers: { 'X-Fleet-Csrf': token }, cache: 'no-store' };
    if (write.body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(write.body);
    }
    fetch(write.path, init).then(function (response) {
      if (!response.ok) return answerText(response).then(function (text) { throw new Error(text); });
      pending = null;
      dialog.close();
    }).catch(function (err) {
      error.textContent = 'refused: ' + err.message;
      ok.disabled = false;
    });
  }

  if (token && dialog) {
    document.addEventListener('click', function (event) {
      var button = event.target.closest('button.act');
      if (!button) return;
      event.preventDefault();
      confirmAction(button.dataset.action, button.dataset.subject);
    });
    document.getElementById('confirm-ok').addEventListener('click', send);
    document.getElementById('confirm-cancel').addEventListener('click', function () { pending = null; dialog.close(); });
  }

  var source = new EventSource('events');
  source.addEventListener('board', function (event) {
    var board = JSON.parse(event.data);
    machines = board.machines;
    rows.clear();
    board.rows.forEach(function (row) { rows.set(row.name, row); });
    renderAll();
    renderRollouts(board.rollouts);
    showState(board);
    if (openUnit) loadDetail(openUnit);
  });
  source.addEventListener('update', function (event) {
    var update = JSON.parse(event.data);
    if (update.machines) {
      machines = update.machines;
      update.rows.forEach(function (row) { rows.set(row.name, row); });
      update.removed.forEach(function (name) { rows.delete(name); });
      renderAll();
    } else {
      update.rows.forEach(putRow);
      update.removed.forEach(removeRow);
      showEmpty();
    }
    if (update.rollouts) renderRollouts(update.rollouts);
    showState(update);
    var touched = update.rows.some(function (row) { return row.name === openUnit; }) ||
      update.removed.indexOf(openUnit) >= 0;
    if (openUnit && touched) loadDetail(openUnit);
  });
  source.addEventListener('error', function () {
    statusLine.textContent = 'reconnecting…';
    statusLine.className = 'status stale';
  });
})();
