(function () {
  "use strict";
  // Every string from the data reaches the page through textContent / createTextNode only.
  var doc = document, root = doc.documentElement;
  var T0 = performance.now();
  var D = JSON.parse(doc.getElementById("tc-data").textContent);
  var T1 = performance.now();
  var app = doc.getElementById("app");
  var rows = []; // {el, data, type: "entry"|"event", sec, hay, folds}
  var sel = -1;

  function el(tag, cls, text) {
    var e = doc.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent, tag, cls, text) { var e = el(tag, cls, text); parent.appendChild(e); return e; }
  function link(parent, href, text, cls) { var a = add(parent, "a", cls, text); a.href = href; return a; }
  function button(parent, act, text) { var b = add(parent, "button", "tg", text); b.type = "button"; b.setAttribute("data-act", act); return b; }
  function when(ts) {
    if (!ts) return "";
    var d = new Date(ts * 1000);
    return isNaN(d) ? "" : d.toISOString().slice(0, 16).replace("T", " ") + "Z";
  }
  function size(n) { return n < 1024 ? n + " B" : n < 1048576 ? (n / 1024).toFixed(1) + " KB" : (n / 1048576).toFixed(1) + " MB"; }
  function short(h) { return String(h || "").slice(0, 12); }
  function plural(n, w) { return n + " " + w + (n === 1 ? "" : "s"); }
  function lines(s) { var n = 1, i = -1; while ((i = s.indexOf("\n", i + 1)) !== -1) n++; return n; }

  // ------------------------------------------------------------------ syntax highlighting
  var KW = {};
  ("and as assert async await break case catch class const continue def default defer del do elif else enum " +
   "except export extends false final finally fn for from func function go if impl import in interface is " +
   "lambda let local loop match mod module mut new nil none not null or package pass pub raise return self " +
   "static struct super switch then this throw trait true try type typeof use var void while with yield " +
   "None True False fi esac done echo int char bool string float double long unsigned select where insert " +
   "update delete create table SELECT FROM WHERE INSERT UPDATE DELETE CREATE TABLE").split(" ").forEach(function (k) { KW[k] = 1; });
  var STR = "\"(?:[^\"\\\\]|\\\\.)*\"?|'(?:[^'\\\\]|\\\\.)*'?";
  var TAIL = "|(\\b\\d[\\w.]*)|([A-Za-z_$][\\w$]*)";
  var RE = {
    hash: new RegExp("(#.*$)|(" + STR + ")" + TAIL, "g"),
    slash: new RegExp("(\\/\\/.*$|\\/\\*.*?(?:\\*\\/|$))|(" + STR + "|`(?:[^`\\\\]|\\\\.)*`?)" + TAIL, "g"),
    dash: new RegExp("(--.*$)|(" + STR + ")" + TAIL, "g")
  };
  var LANG = {};
  "py pyi sh bash zsh rb pl pm r yaml yml toml cfg conf ini mk cmake nix tf dockerfile makefile gitignore".split(" ").forEach(function (x) { LANG[x] = "hash"; });
  "js mjs cjs ts tsx jsx c h cc cpp cxx hpp hh java go rs cs kt kts swift scala css scss less php json jsonc dart zig proto groovy gradle m mm".split(" ").forEach(function (x) { LANG[x] = "slash"; });
  "sql lua hs elm ada".split(" ").forEach(function (x) { LANG[x] = "dash"; });
  function langOf(path) {
    var base = String(path).split("/").pop().toLowerCase();
    var dot = base.lastIndexOf(".");
    return RE[LANG[dot >= 0 ? base.slice(dot + 1) : base]] || null;
  }
  function hl(parent, text, re) {
    if (!re || text.length > 2000) { parent.appendChild(doc.createTextNode(text)); return; }
    re.lastIndex = 0;
    var last = 0, m, cls;
    while ((m = re.exec(text))) {
      if (!m[0]) { re.lastIndex++; continue; }
      cls = m[1] ? "cm" : m[2] ? "s" : m[3] ? "nu" : (KW[m[4]] === 1 ? "kw" : null);
      if (!cls) continue;
      if (m.index > last) parent.appendChild(doc.createTextNode(text.slice(last, m.index)));
      add(parent, "span", cls, m[0]);
      last = m.index + m[0].length;
    }
    if (last < text.length) parent.appendChild(doc.createTextNode(text.slice(last)));
  }

  // ------------------------------------------------------------------ diffs (built on demand)
  function buildDiff(box, r) {
    var d;
    try { d = JSON.parse(doc.getElementById("tc-diff-" + r.data.d).textContent); }
    catch (err) { add(box, "div", "note", "diff data unreadable"); return; }
    var cmd = r.prev ? "tc diff " + r.prev + " " + r.data.id : null;
    if (d.budget) add(box, "div", "note", "diff not embedded: this page's diff budget is spent" + (cmd ? "; run: " + cmd : ""));
    d.f.forEach(function (f) {
      var df = add(box, "div", "df");
      var fh = add(df, "div", "fh");
      add(fh, "span", "st st-" + f.s, f.s + " ");
      fh.appendChild(doc.createTextNode(f.o ? f.o + " → " + f.p : f.p));
      if (f.b) { add(df, "div", "note", "binary file"); return; }
      if (!f.l) { if (!d.budget) add(df, "div", "note", "no textual change (mode or rename)"); return; }
      var re = langOf(f.p), pre = add(df, "pre");
      for (var i = 0; i < f.l.length; i++) {
        var s = f.l[i], c = s.charAt(0), line;
        if (c === "@") { add(pre, "span", "dl h", s); continue; }
        if (c === "\\") { add(pre, "span", "dl n", "\\ " + s.slice(1)); continue; }
        line = add(pre, "span", "dl" + (c === "+" ? " a" : c === "-" ? " d" : ""));
        line.appendChild(doc.createTextNode(c));
        hl(line, s.slice(1), re);
      }
      if (f.x) add(df, "div", "note", "truncated: " + f.x + " more line" + (f.x === 1 ? "" : "s") + " not shown" + (cmd ? " (full patch: " + cmd + ")" : ""));
    });
    if (d.om) add(box, "div", "note", "truncated: " + d.om + " more file" + (d.om === 1 ? "" : "s") + " not shown" + (cmd ? " (full patch: " + cmd + ")" : ""));
    else if (d.tr && !d.f.some(function (f) { return f.x; })) add(box, "div", "note", "truncated" + (cmd ? " (full patch: " + cmd + ")" : ""));
  }

  // ------------------------------------------------------------------ task timeline
  var KLABEL = { step: "step", drift: "drift", restore: "restore", "import": "import", close: "closed", init: "task started" };
  var msByName = {};
  (D.milestones || []).forEach(function (m) { msByName[m.name] = m; });
  var shownCode = {}, shownEvent = {};
  (D.tasks || []).forEach(function (t) { t.entries.forEach(function (e) { shownCode[e.cm] = 1; }); });
  (D.sessions || []).forEach(function (s) { s.events.forEach(function (e) { shownEvent[e.c] = 1; }); });

  function msBadges(hd, names, side) {
    (names || []).forEach(function (n) {
      var m = msByName[n] || { name: n };
      var target = side === "code" ? (m.event && shownEvent[m.event] ? "#e-" + short(m.event) : null)
                                   : (m.code && shownCode[m.code] ? "#c-" + short(m.code) : null);
      var b = target ? link(hd, target, "★ " + n, "badge ms") : add(hd, "span", "badge ms", "★ " + n);
      b.title = side === "code" ? "milestone: the conversation at this step" : "milestone" + (m.step ? " → code " + m.step + (m.task ? " of task " + m.task : "") : "");
      if (side !== "code" && m.step) {
        var c = m.code && shownCode[m.code] ? link(hd, "#c-" + short(m.code), "→ code " + m.step, "meta") : add(hd, "span", "meta", "→ code " + m.step + (m.task ? " (task " + m.task + ")" : ""));
        c.title = "the code timeline commit this milestone names";
      }
    });
  }

  function renderTask(t) {
    var sec = el("section");
    sec.id = "task-" + t.id;
    add(sec, "h2", null, "Task: " + (t.name || t.id));
    add(sec, "p", "sub", t.id + " · " + t.status + " · step " + t.head + " · " + t.entries.length + " entries");
    if (t.goal) { var g = add(sec, "p", "sub"); add(g, "span", "lbl", "Goal"); g.appendChild(doc.createTextNode(t.goal)); }
    if (t.constraints) { var cs = add(sec, "p", "sub"); add(cs, "span", "lbl", "Constraints"); cs.appendChild(doc.createTextNode(t.constraints)); }
    (t.lines || []).forEach(function (l) {  // the task continued on another machine too (tc-git adopt joins it)
      var lp = add(sec, "p", "sub"); add(lp, "span", "lbl", "Other line");
      lp.appendChild(doc.createTextNode(l[0] + " · " + short(l[1]) + " · " + l[2] + " · join: tc-git adopt " + l[0]));
    });
    var byId = {};
    t.entries.forEach(function (e) { if (!(e.id in byId) || e.k === "step") byId[e.id] = e.cm; });
    var ol = add(sec, "ol", "rows");
    var prev = null;
    t.entries.forEach(function (e) {
      rows.push({ data: e, type: "entry", prev: prev, ol: ol, byId: byId, id: "c-" + short(e.cm), folds: 0, el: null, build: buildEntry });
      prev = e.k === "init" ? null : e.id;
    });
    return sec;
  }

  function buildEntry(r) {
    var e = r.data, byId = r.byId;
    var li = el("li", "row k-" + e.k);
    li.id = r.id;
    r.el = li;
      var hd = add(li, "div", "hd");
      add(hd, "span", "badge k", e.k === "step" ? "step " + e.n : e.k === "drift" ? "drift " + e.id : KLABEL[e.k] || e.k);
      add(hd, "span", "title", e.t || "");
      if (e.fc) {
        var pm = add(hd, "span", "pm", e.fc + " file" + (e.fc === 1 ? "" : "s"));
        if (e.da !== undefined) { pm.appendChild(doc.createTextNode(" ")); add(pm, "span", "a", "+" + e.da); pm.appendChild(doc.createTextNode(" ")); add(pm, "span", "d", "−" + e.dd); }
      }
      add(hd, "time", null, when(e.ts));
      msBadges(hd, e.ms, "code");
      if (e.c) add(li, "div", "txt", e.c);
      if (e.de) add(li, "div", "txt meta", e.de);
      if (e.tg) {
        var tg = add(li, "div", "txt");
        add(tg, "span", "lbl", "Restored to");
        if (byId[e.tg]) link(tg, "#c-" + short(byId[e.tg]), e.tg); else tg.appendChild(doc.createTextNode(e.tg));
        if (e.ud) { add(tg, "span", "lbl", " · undo:"); tg.appendChild(doc.createTextNode("tc-git restore " + e.ud + " --apply")); }
      }
      if (e.rp) add(li, "div", "txt meta", "restore point: the workspace just before a restore");
      if (e.nx) { var nx = add(li, "div", "txt"); add(nx, "span", "lbl", "Next"); nx.appendChild(doc.createTextNode(e.nx)); }
      if (e.v) { var v = add(li, "ul", "v"); e.v.forEach(function (x) { add(v, "li", null, x); }); }
      if (e.q) { var q = add(li, "ul", "q"); e.q.forEach(function (x) { add(q, "li", null, x); }); }
      if (e.tr) {
        var trd = add(li, "div", "txt meta");
        if (shownEvent[e.tr]) link(trd, "#e-" + short(e.tr), "conversation at this step"); else trd.textContent = "trajectory " + short(e.tr);
      }
      var meta = add(li, "div", "meta", short(e.cm) + (e.by ? " · " + e.by : ""));
      meta.title = e.cm;
      if (e.fl && e.fl.length) button(li, "files", "files");
      if (e.d !== undefined) button(li, "diff", "diff");
      if (e.lf) button(li, "left", "not stored (" + e.lf.length + ")");
  }

  // ------------------------------------------------------------------ conversation
  var ELABEL = { user: "User", assistant: "Assistant", tool_call: "Tool call", tool_result: "Tool result", system: "System", summary: "Summary" };
  var PREVIEW = 600;

  function renderBranches(sec, s) {
    var ul = add(sec, "ul", "tree");
    var main = s.branches.filter(function (b) { return b.name === "main"; })[0] || s.branches[0];
    var first = add(ul, "li");
    first.appendChild(doc.createTextNode("● "));
    if (main) {
      link(first, "#e-" + short(main.tip), main.name);
      first.appendChild(doc.createTextNode("  (" + s.events.length + " events in all)"));
    }
    var named = {};
    s.events.forEach(function (e) { if (e.fk) named[e.fk.br] = 1; });
    s.branches.forEach(function (b) {
      if (b === main || named[b.name]) return;
      var li = add(ul, "li");
      li.appendChild(doc.createTextNode("⎇ "));
      link(li, "#e-" + short(b.tip), b.name);
      li.appendChild(doc.createTextNode("  at #" + (b.row === null || b.row === undefined ? "?" : b.row)));
    });
    s.events.forEach(function (e, i) {
      if (!e.fk) return;
      var li = add(ul, "li");
      var pad = "";
      for (var k = 1; k < (e.dp || 1); k++) pad += "│  ";
      li.appendChild(doc.createTextNode(pad + "└─⎇ "));
      link(li, "#e-" + short(e.c), e.fk.br);
      li.appendChild(doc.createTextNode("  " + plural(e.fk.end - i, "event") + ", forks after #" + (e.fk.from === null || e.fk.from === undefined ? "?" : e.fk.from)));
    });
  }

  function renderSession(s) {
    var sec = el("section");
    sec.id = "session-" + s.key;
    add(sec, "h2", null, "Conversation: " + (s.title || s.key));
    add(sec, "p", "sub", s.agent + " · session " + s.session + " · " + s.events.length + " events · " +
        s.branches.length + " branch" + (s.branches.length === 1 ? "" : "es") +
        (s.store === "user" ? " · recorded in the user-level store" : ""));
    renderBranches(sec, s);
    var ms = (D.milestones || []).filter(function (m) { return s.events.some(function (e) { return e.c === m.event; }); });
    if (ms.length) {
      var ml = add(sec, "ul", "mslist");
      ms.forEach(function (m) {
        var li = add(ml, "li");
        link(li, "#e-" + short(m.event), "★ " + m.name, "badge ms");
        if (m.title) li.appendChild(doc.createTextNode(" " + m.title));
        if (m.step) {
          li.appendChild(doc.createTextNode(" → "));
          if (shownCode[m.code]) link(li, "#c-" + short(m.code), "code " + m.step);
          else li.appendChild(doc.createTextNode("code " + m.step + (m.task ? " of task " + m.task : "")));
        }
      });
    }
    var ol = add(sec, "ol", "rows");
    s.events.forEach(function (e, i) {
      rows.push({ data: e, type: "event", sec: s, idx: i, ol: ol, id: "e-" + short(e.c), folds: 0, el: null, build: buildEvent });
    });
    return sec;
  }

  function buildEvent(r) {
    var e = r.data, s = r.sec, i = r.idx;
    var li = el("li", "row k-" + e.k + (e.err ? " err" : "") + (e.dp ? " ind" : ""));
    li.id = r.id;
    if (e.dp) li.style.marginLeft = Math.min(e.dp, 8) * 14 + "px";
    r.el = li;
      if (e.fk) {
        var fk = add(li, "div", "fork", "⎇ branch " + e.fk.br + (e.fk.from !== null && e.fk.from !== undefined ? " — forks after #" + e.fk.from : ""));
        if (e.fk.end - i > 1) { fk.appendChild(doc.createTextNode(" ")); button(fk, "fold", "fold " + plural(e.fk.end - i - 1, "event")); }
      }
      var hd = add(li, "div", "hd");
      add(hd, "span", "gut", "#" + i);
      add(hd, "span", "badge k", (ELABEL[e.k] || e.k) + (e.err ? " · error" : ""));
      if (e.tn) add(hd, "span", "title", e.tn);
      if (e.sc) add(hd, "span", "meta", "subagent " + e.sc);
      add(hd, "time", null, when(e.ts));
      (e.tip || []).forEach(function (b) { add(hd, "span", "badge tip", "⎇ " + b).title = "tip of branch " + b; });
      msBadges(hd, e.ms, "event");
      if (e.cd && !(e.ms && e.ms.length)) {
        var cd = shownCode[e.cd.c] ? link(hd, "#c-" + short(e.cd.c), "→ code " + (e.cd.s || short(e.cd.c)), "meta")
                                   : add(hd, "span", "meta", "→ code " + (e.cd.s || short(e.cd.c)) + (e.cd.t ? " (task " + e.cd.t + ")" : ""));
        cd.title = "the code timeline at this moment";
      }
      if (e.pi !== undefined) {
        var pi = add(li, "div", "meta");
        pi.appendChild(doc.createTextNode("follows "));
        link(pi, "#e-" + short(s.events[e.pi].c), "#" + e.pi);
      }
      if (e.x) {
        var long = e.x.length > PREVIEW || lines(e.x) > 12;
        var tx = add(li, "div", "txt", long ? e.x.slice(0, PREVIEW).split("\n").slice(0, 12).join("\n") + " …" : e.x);
        r.textEl = tx;
        if (long || e.xn) button(li, "more", "full text (" + size(e.xn > 0 ? e.xn : e.x.length) + ")");
      }
      if (e.k === "tool_call" && e.ts1) add(li, "pre", "out", e.ts1);
      if (e.ti && e.ti !== e.ts1) button(li, "inp", "input" + (e.tin ? " (" + size(e.tin > 0 ? e.tin : e.ti.length) + ", cut)" : ""));
      if (e.to !== undefined) {
        var n = lines(e.to);
        if (e.to.length <= 400 && n <= 6 && !e.ton) add(li, "pre", "out", e.to);
        else {
          var pv = e.to.split("\n").slice(0, 3).join("\n");
          r.outEl = add(li, "pre", "out", (pv.length > 300 ? pv.slice(0, 300) : pv) + "\n…");
          button(li, "out", "output: " + n + " lines, " + size(e.ton > 0 ? e.ton : e.to.length) + (e.ton ? " (cut)" : ""));
        }
      }
  }

  // ------------------------------------------------------------------ progressive build
  var built = 0;
  function buildRow(r, n) {
    r.build(r);
    r.el._r = n;
    if (r.folds === 0) r.ol.appendChild(r.el);
  }
  function buildUpTo(n) { n = Math.min(n, rows.length); while (built < n) { buildRow(rows[built], built); built++; } }
  function buildAll() { buildUpTo(rows.length); }

  // ------------------------------------------------------------------ actions
  function after(li, node) { li.appendChild(node); return node; }
  function toggle(r, act, force) {
    var e = r.data, li = r.el, key = "x_" + act, box = r[key];
    if (box) {
      var show = force === undefined ? box.hidden : force;
      box.hidden = !show;
      if (act === "out" && r.outEl) r.outEl.hidden = show;
      if (act === "more" && r.textEl) r.textEl.hidden = show;
      return;
    }
    if (force === false) return;
    if (act === "diff") { box = after(li, el("div", "diff")); buildDiff(box, r); }
    else if (act === "files") {
      box = after(li, el("ul", "files"));
      e.fl.forEach(function (f) { var x = add(box, "li"); add(x, "span", "st st-" + f[0], f[0]); x.appendChild(doc.createTextNode(f[1])); });
      if (e.fc > e.fl.length) add(box, "li", "note", (e.fc - e.fl.length) + " more");
    } else if (act === "left") {
      box = after(li, el("ul", "files"));
      e.lf.forEach(function (f) { add(box, "li", null, f[0] + " — " + f[1] + " (not stored)"); });
    } else if (act === "more") {
      box = after(li, el("div", "txt", e.x + (e.xn ? "\n… (" + (e.xn > 0 ? size(e.xn) + " in all; " : "") + "the rest is in the store)" : "")));
      if (r.textEl) r.textEl.hidden = true;
    } else if (act === "inp") {
      box = after(li, el("pre", "out", e.ti + (e.tin ? "\n… (cut)" : "")));
    } else if (act === "out") {
      box = after(li, el("pre", "out", e.to + (e.ton ? "\n… (cut; " + (e.ton > 0 ? size(e.ton) + " in all" : "budget spent") + ")" : "")));
      if (r.outEl) r.outEl.hidden = true;
    } else if (act === "fold") {
      foldBranch(r, true);
      r[key] = { hidden: false };
      return;
    } else return;
    r[key] = box;
  }
  function foldBranch(r, fold) {
    // folded rows leave the DOM (toggling display on thousands of rows is slow); they come back
    // in order before the first attached row after the range
    var base = rows.indexOf(r) - r.idx, end = r.data.fk.end, i, x, anchor = null;
    if (!fold) {
      for (i = base + end; i < rows.length && rows[i].ol === r.ol; i++) if (rows[i].el && rows[i].el.parentNode) { anchor = rows[i].el; break; }
    }
    for (i = r.idx + 1; i < end; i++) {
      x = rows[base + i];
      x.folds += fold ? 1 : -1;
      if (!x.el) continue;
      if (fold && x.folds === 1 && x.el.parentNode) x.el.parentNode.removeChild(x.el);
      else if (!fold && x.folds === 0) r.ol.insertBefore(x.el, anchor);
    }
    var b = r.el.querySelector("button[data-act=fold]");
    if (b) b.textContent = (fold ? "unfold " : "fold ") + plural(end - r.idx - 1, "event");
    r.folded = fold;
  }
  function act(r, name) {
    if (name === "fold") { if (r.data.fk) foldBranch(r, !r.folded); return; }
    toggle(r, name);
  }
  var ACTS = ["files", "diff", "left", "more", "inp", "out"];
  function expandRow(r, on) {
    ACTS.forEach(function (a) {
      if (r.el.querySelector("button[data-act=" + a + "]")) toggle(r, a, on);
    });
  }
  function openOrClose(r) {
    var open = ACTS.some(function (a) { return r["x_" + a] && !r["x_" + a].hidden; });
    expandRow(r, !open);
  }
  function unfoldAll() { rows.forEach(function (r) { if (r.folded) foldBranch(r, false); }); }
  function expandAll() { buildAll(); unfoldAll(); rows.forEach(function (r) { expandRow(r, true); }); }

  app.addEventListener("click", function (ev) {
    var b = ev.target.closest ? ev.target.closest("button[data-act]") : null;
    var li = ev.target.closest ? ev.target.closest(".row") : null;
    if (!li) return;
    var r = rows[li._r];
    if (!r) return;
    select(li._r, false);
    if (b) act(r, b.getAttribute("data-act"));
  });

  // ------------------------------------------------------------------ search
  var q = doc.getElementById("q"), count = doc.getElementById("count"), timer = 0;
  function hay(r) {
    if (r.hay === undefined) {
      var e = r.data, parts;
      if (r.type === "entry") parts = [e.id, e.t, e.c, e.de, e.nx, (e.v || []).join("\n"), (e.q || []).join("\n"), (e.fl || []).map(function (f) { return f[1]; }).join("\n"), (e.ms || []).join(" "), e.cm];
      else parts = [ELABEL[e.k], e.tn, e.x, e.ts1, e.ti && e.ti.slice(0, 4000), e.to && e.to.slice(0, 4000), (e.tip || []).join(" "), (e.ms || []).join(" "), e.fk && e.fk.br, e.c];
      r.hay = parts.filter(Boolean).join("\n").toLowerCase();
    }
    return r.hay;
  }
  var res = el("div", "results"), resList = add(res, "ol", "rlist"), resSel = -1, MAXRES = 300;
  res.hidden = true;
  function label(r) {
    var e = r.data;
    if (r.type === "entry") return (e.k === "step" ? "step " + e.n : e.k === "drift" ? "drift " + e.id : KLABEL[e.k] || e.k) + ": " + (e.t || "");
    var t = e.x || e.ts1 || e.to || "";
    return "#" + r.idx + " " + (ELABEL[e.k] || e.k) + (e.tn ? " " + e.tn : "") + ": " + t.slice(0, 160).replace(/\s+/g, " ");
  }
  function search() {
    var v = q.value.trim().toLowerCase(), n = 0;
    resList.textContent = "";
    resSel = -1;
    if (!v) {
      res.hidden = true;
      app.classList.remove("searching");
      count.textContent = rows.length + " items";
      return;
    }
    var frag = doc.createDocumentFragment();
    for (var i = 0; i < rows.length; i++) {
      if (hay(rows[i]).indexOf(v) === -1) continue;
      if (++n <= MAXRES) {
        var li = add(frag, "li", "res");
        link(li, "#" + rows[i].id, label(rows[i]));
      }
    }
    if (n > MAXRES) add(frag, "li", "note", (n - MAXRES) + " more: refine the search");
    if (!n) add(frag, "li", "note", "no match");
    resList.appendChild(frag);
    res.hidden = false;
    app.classList.add("searching");
    count.textContent = n + " of " + rows.length + " match";
  }
  function closeSearch() { if (q.value) { q.value = ""; search(); } }
  q.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(search, rows.length > 3000 ? 120 : 40); });

  // ------------------------------------------------------------------ keyboard
  function visible(r) { return !!(r.el && r.el.parentNode); }
  function select(i, scroll) {
    if (sel >= 0 && rows[sel] && rows[sel].el) rows[sel].el.classList.remove("sel");
    sel = i;
    if (i < 0 || !rows[i] || !rows[i].el) { sel = -1; root.removeAttribute("data-sel"); return; }
    rows[i].el.classList.add("sel");
    root.setAttribute("data-sel", rows[i].id);
    if (scroll !== false) rows[i].el.scrollIntoView({ block: "nearest" });
  }
  function move(step) {
    if (!res.hidden) {
      var items = resList.querySelectorAll("li.res");
      if (!items.length) return;
      if (items[resSel]) items[resSel].classList.remove("sel");
      resSel = Math.max(0, Math.min(items.length - 1, resSel + step));
      items[resSel].classList.add("sel");
      items[resSel].scrollIntoView({ block: "nearest" });
      return;
    }
    for (var i = sel + step; i >= 0 && i < built; i += step) if (visible(rows[i])) { select(i); return; }
  }
  function openSelected() {
    if (!res.hidden) {
      var items = resList.querySelectorAll("li.res");
      if (items[resSel]) location.hash = items[resSel].firstChild.getAttribute("href");
      return;
    }
    if (sel >= 0) openOrClose(rows[sel]);
  }
  doc.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.target === q) {
      if (ev.key === "Escape") { closeSearch(); q.blur(); }
      else if (ev.key === "Enter" || ev.key === "ArrowDown") { clearTimeout(timer); search(); q.blur(); resSel = -1; move(1); ev.preventDefault(); }
      return;
    }
    if (ev.target && /^(INPUT|TEXTAREA|SELECT)$/.test(ev.target.tagName)) return;
    var k = ev.key;
    if (k === "j" || k === "ArrowDown") move(1);
    else if (k === "k" || k === "ArrowUp") { if (sel < 0 && res.hidden) return; move(-1); }
    else if (k === "/") q.focus();
    else if ((k === "Enter" || k === "o") && ev.target.tagName !== "BUTTON" && ev.target.tagName !== "A") openSelected();
    else if (k === "Escape") { closeSearch(); select(-1); }
    else if (k === "g" && res.hidden) { sel = -1; move(1); }
    else if (k === "G" && res.hidden) { sel = built; move(-1); }
    else return;
    ev.preventDefault();
  });

  function goHash() {
    var h = decodeURIComponent(location.hash.slice(1));
    if (h === "expand-all") { expandAll(); return; }
    if (!h) return;
    closeSearch();
    var t = doc.getElementById(h);
    if (!t && built < rows.length) { buildAll(); t = doc.getElementById(h); }
    if (!t) {  // a folded row: unfold and try again
      for (var i = 0; i < rows.length; i++) if (rows[i].id === h && rows[i].folds) { unfoldAll(); break; }
      t = doc.getElementById(h);
    }
    var li = t && t.closest ? t.closest(".row") : null;
    if (!li) { if (t) t.scrollIntoView(); return; }
    select(li._r);
  }
  window.addEventListener("hashchange", goHash);

  // ------------------------------------------------------------------ build the page
  var frag = doc.createDocumentFragment(), nav = doc.getElementById("nav");
  (D.tasks || []).forEach(function (t) {
    frag.appendChild(renderTask(t));
    link(nav, "#task-" + t.id, "Timeline: " + (t.name || t.id) + " (" + t.entries.length + ")");
  });
  (D.sessions || []).forEach(function (s) {
    frag.appendChild(renderSession(s));
    link(nav, "#session-" + s.key, "Conversation: " + ((s.title || s.key).slice(0, 40)) + " (" + s.events.length + ")");
  });
  if (D.budget && (D.budget.diffs || D.budget.events)) {
    add(frag, "p", "note", "This history is larger than one page holds: some " + (D.budget.diffs ? "diffs" : "") +
        (D.budget.diffs && D.budget.events ? " and " : "") + (D.budget.events ? "outputs" : "") + " are shortened; the store has them in full.");
  }
  if (!rows.length) add(frag, "p", "sub", "Nothing recorded yet.");
  add(frag, "p", "meta", "generated " + (D.generated || "") + " by tc-git");
  app.textContent = "";
  app.appendChild(res);
  app.appendChild(frag);
  count.textContent = rows.length + " items";
  // the first screen now, the rest in 30 ms slices that leave the page responsive
  var FIRST = 150;
  buildUpTo(FIRST);
  root.setAttribute("data-rows", String(rows.length));
  root.setAttribute("data-render-ms", performance.now().toFixed(1));
  root.setAttribute("data-phases", [T0, T1 - T0, performance.now() - T1].map(function (x) { return x.toFixed(1); }).join(" "));
  function finished() {
    root.setAttribute("data-built-ms", performance.now().toFixed(1));
    if (location.hash.length > 1) goHash();
    var marked = false;
    function ready() {
      if (marked) return;
      marked = true;
      root.setAttribute("data-complete-ms", performance.now().toFixed(1));
      root.setAttribute("data-ready", "1");
    }
    // ready once the built page is painted; a page that gets no frame (a hidden tab, a headless
    // --dump-dom whose virtual time runs past a frame that a loaded machine has not drawn) anyway
    requestAnimationFrame(function () { setTimeout(ready, 0); });
    setTimeout(ready, 250);
  }
  // a MessageChannel schedules the next slice at once (nested setTimeouts are clamped to 4 ms)
  var chan = typeof MessageChannel === "function" ? new MessageChannel() : null;
  function later(fn) { if (chan) { chan.port1.onmessage = fn; chan.port2.postMessage(0); } else setTimeout(fn, 0); }
  function slice() {
    var end = performance.now() + 30;
    while (built < rows.length && performance.now() < end) { buildRow(rows[built], built); built++; }
    if (built < rows.length) later(slice); else finished();
  }
  if (built < rows.length && !(location.hash.length > 1)) later(slice);
  else { buildAll(); finished(); }
  window.addEventListener("load", function () {
    root.setAttribute("data-resources", String(performance.getEntriesByType("resource").length));
  });
})();
