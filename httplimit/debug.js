"use strict";
// The debug page's script: every second it fetches the page's JSON form,
// writes it into the tables (as text: a key is never parsed as HTML) and
// adds a point to the chart of decisions per second.
(function () {
	const every = 1000; // ms between refreshes
	const keep = 120; // points on the chart
	const url = new URL(location.href);
	url.searchParams.set("format", "json");
	const $ = (id) => document.getElementById(id);
	const points = []; // {allowed, denied}: decisions per second
	let last = null; // {t, allowed, denied}: the counts of the last refresh

	// rows fills tbody with a row of cells for each item: the texts, and
	// for a cell given as [text, class], its class too.
	function rows(tbody, items, cells, empty) {
		tbody.replaceChildren();
		for (const item of items) {
			const tr = tbody.insertRow();
			for (const c of cells(item)) {
				const td = tr.insertCell();
				const [text, cls, span] = Array.isArray(c) ? c : [c];
				td.textContent = text;
				if (cls) td.className = cls;
				if (span) td.colSpan = span;
			}
		}
		if (items.length === 0 && empty) {
			const td = tbody.insertRow().insertCell();
			td.textContent = empty[0];
			td.colSpan = empty[1];
		}
	}

	function left(k) {
		return k.left.map((q) => q.policy + ": " + q.remaining + (q.more ? " (+1 in " + q.more + ")" : "")).join(", ");
	}

	function show(v) {
		rows($("top-denied"), v.top_denied, (k) => {
			const key = [k.quoted || k.key, "key"]; // quoted: it has what would not read as itself
			const count = [k.count + (k.err ? " (±" + k.err + ")" : ""), "n"];
			if (k.error) return [key, count, [k.error, "error", 2]];
			const now = k.held_for ? ["held " + k.held_for, "held"] : k.allowed ? "allowed" : "denied, retry in " + k.retry_after;
			return [key, count, now, left(k)];
		}, [v.n ? "no denials in the last minute" : "none asked for (n=0)", 4]);
		rows($("policies"), v.policies, (p) => [p.name, p.algorithm, [p.limit, "n"], p.window, [p.burst || "", "n"], p.dry_run ? "yes" : "no"]);
		rows($("policy-stats"), v.policy_stats, (p) => [p.name, [p.denied, "n"], [p.would_deny, "n"]]);
		for (const tr of $("stats").rows) {
			tr.cells[1].textContent = v.stats[tr.dataset.stat];
		}
	}

	function sample(v) {
		const now = { t: performance.now(), allowed: v.stats.allowed, denied: v.stats.denied };
		if (last && now.t > last.t) {
			const s = (now.t - last.t) / 1000;
			points.push({ allowed: Math.max(0, now.allowed - last.allowed) / s, denied: Math.max(0, now.denied - last.denied) / s });
			if (points.length > keep) points.shift();
		}
		last = now;
	}

	function draw() {
		const x0 = 40, x1 = 590, y0 = 130, y1 = 20;
		const top = Math.max(1, ...points.map((p) => Math.max(p.allowed, p.denied)));
		const line = (f) => points.map((p, i) => {
			const x = x1 - (points.length - 1 - i) * (x1 - x0) / (keep - 1);
			const y = y0 - f(p) / top * (y0 - y1);
			return x.toFixed(1) + "," + y.toFixed(1);
		}).join(" ");
		$("chart-allowed").setAttribute("points", line((p) => p.allowed));
		$("chart-denied").setAttribute("points", line((p) => p.denied));
		$("chart-max").textContent = (top < 10 ? top.toFixed(1) : Math.round(top)) + "/s";
		$("chart").dataset.points = points.length;
	}

	async function refresh() {
		try {
			const res = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
			if (!res.ok) throw new Error("the page answered " + res.status);
			const v = await res.json();
			show(v);
			sample(v);
			draw();
			$("status").textContent = "live: refreshed at " + new Date().toLocaleTimeString();
		} catch (e) {
			$("status").textContent = "stale: " + e.message;
		}
		setTimeout(refresh, every);
	}
	refresh();
})();
