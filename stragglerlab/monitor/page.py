# ruff: noqa: E501  (an HTML document with inline JS: its lines are the page's)
"""The monitor's page: one self-contained HTML document (inline CSS and JS, no CDN).

It loads the history from `api/windows` (so a browser reload keeps every
window), then follows `events` (server-sent events) without reloading. It
draws S per window over time, the DP x stage worker heatmap of the selected
window (a slider goes back through history; it follows the latest window while
at the right end) on a canvas, so 1,000+ workers cost one fillRect each and
hovering names the worker, the current findings, the attribution by op type,
the errors the monitor recorded and, apart and labelled, the run's ground
truth (faults.json) from `api/truth`, and again from the stream's last word
(`event: end`, sent when the monitor stops: the page then stops listening and
shows "run ended"). A lost stream shows one "reconnecting" note and is retried
with a backoff up to 30 s. Tested in headless Chromium by
tests/e2e/test_monitor_page.py (no console errors allowed). Its URLs are relative,
so the same page serves one job of several at /jobs/NAME/ (with a link back).

`OVERVIEW` is the page of a monitor of several jobs (`--runs`, `--watch`): one
table of the jobs, highest current S first, with their findings, each linking
to its page; it reloads `api/jobs` every second. Tested by
tests/e2e/test_monitor_jobs.py.
"""

from __future__ import annotations

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>stragglerlab monitor</title>
<link rel="icon" href="data:,">
<style>
body{font:14px system-ui,sans-serif;margin:0;background:#fafafa;color:#222}
header{background:#263238;color:#fff;padding:10px 16px}
header h1{font-size:18px;margin:0 0 4px 0}
#status span{margin-right:18px}
main{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:12px;padding:12px}
section{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px 12px}
section h2{font-size:15px;margin:0 0 8px 0}
.wide{grid-column:1/-1}
canvas{display:block;width:100%}
table{border-collapse:collapse;width:100%;font-size:13px}
td,th{border-bottom:1px solid #eee;padding:3px 6px;text-align:left;vertical-align:top}
#truth{border:2px dashed #7b1fa2;background:#fbf5fd}
#truth h2{color:#7b1fa2}
.err{color:#b71c1c;font-family:monospace;font-size:12px;white-space:pre-wrap}
#tip{position:fixed;pointer-events:none;background:#263238;color:#fff;padding:3px 6px;
border-radius:4px;font-size:12px;display:none}
.muted{color:#777}
.lost{background:#b71c1c;color:#fff;padding:0 6px;border-radius:3px}
#legend{height:10px;margin-top:4px;border-radius:2px}
</style></head>
<body>
<header><h1>stragglerlab monitor <span id="run" class="muted"></span>
<a id="alljobs" href="../../" hidden style="color:#fff;font-size:13px;margin-left:12px">&larr; all jobs</a></h1>
<div id="status">connecting...</div></header>
<main>
<section class="wide"><h2>Job slowdown S per window</h2><canvas id="chart" height="180"></canvas></section>
<section><h2>Worker slowdown min(S<sub>dp</sub>, S<sub>stage</sub>): DP rank &rarr;, stage &darr;</h2>
<div><input id="slider" type="range" min="0" max="0" value="0" style="width:100%">
<div id="wlabel" class="muted">no window yet</div></div>
<canvas id="heat" height="240"></canvas>
<div id="legend"></div><div class="muted" id="lscale"></div>
<div id="top" class="muted"></div></section>
<section><h2>Findings of the window</h2><div id="findings" class="muted">none</div>
<h2 style="margin-top:14px">Attribution by op type</h2><div id="optypes"></div></section>
<section class="wide" id="truth"><h2>Ground truth (faults.json): the faults injected, not an input
to the analysis</h2><div id="truthbody" class="muted">loading...</div></section>
<section class="wide"><h2>Errors</h2><div id="errors" class="muted">none</div></section>
</main><div id="tip"></div>
<script>
"use strict";
const st={lines:[],windows:[],errors:[],sel:-1,summary:{},pending:false,retry:0,down:false,ended:false};
const $=id=>document.getElementById(id);
const esc=s=>String(s).replace(/[&<>"]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));
const fmt=(x,d=3)=>x==null?"-":Number(x).toFixed(d);
function add(l){
  const last=st.lines.length?st.lines[st.lines.length-1].seq:-1;
  if(l.seq<=last)return false;
  st.lines.push(l);
  if(l.kind==="window"){const follow=st.sel<0||st.sel===st.windows.length-1;
    st.windows.push(l); if(follow)st.sel=st.windows.length-1;}
  else if(l.kind==="error")st.errors.push(l);
  return true;
}
function later(){if(!st.pending){st.pending=true;requestAnimationFrame(()=>{st.pending=false;render();});}}
function color(s,vmax){
  if(s==null)return"#ccc";
  const t=Math.max(0,Math.min(1,(s-1)/(vmax-1)));
  const stops=[[240,249,232],[253,174,97],[215,25,28]];
  const k=t<0.5?0:1,u=t<0.5?t*2:(t-0.5)*2,a=stops[k],b=stops[k+1];
  return`rgb(${a.map((v,i)=>Math.round(v+(b[i]-v)*u)).join(",")})`;
}
function fit(c){const r=window.devicePixelRatio||1,w=c.clientWidth,h=c.height/(c._r||1);
  c._r=r;c.width=w*r;c.height=h*r;const g=c.getContext("2d");g.setTransform(r,0,0,r,0,0);return[g,w,h];}
function drawChart(){
  const[g,w,h]=fit($("chart"));g.clearRect(0,0,w,h);
  const ws=st.windows;if(!ws.length){g.fillStyle="#777";g.fillText("waiting for the first complete steps",10,20);return;}
  const xs=ws.map(x=>x.step),ys=ws.map(x=>x.slowdown||1);
  const x0=Math.min(...xs),x1=Math.max(...xs,x0+1),y1=Math.max(1.1,...ys)*1.03,y0=1;
  const L=44,B=20,X=v=>L+(v-x0)/(x1-x0)*(w-L-10),Y=v=>h-B-(v-y0)/(y1-y0)*(h-B-8);
  g.strokeStyle="#ddd";g.fillStyle="#555";g.font="11px sans-serif";
  for(let i=0;i<=4;i++){const v=y0+(y1-y0)*i/4;g.beginPath();g.moveTo(L,Y(v));g.lineTo(w-10,Y(v));g.stroke();g.fillText(v.toFixed(2),4,Y(v)+4);}
  g.fillText("step "+x0,L,h-5);g.fillText("step "+x1,w-60,h-5);
  g.strokeStyle="#1565c0";g.lineWidth=2;g.beginPath();
  ws.forEach((x,i)=>{const p=[X(x.step),Y(x.slowdown||1)];i?g.lineTo(...p):g.moveTo(...p);});g.stroke();g.lineWidth=1;
  ws.forEach(x=>{if((x.findings||[]).length){g.fillStyle="#d7191c";g.fillRect(X(x.step)-2,Y(x.slowdown||1)-2,4,4);}});
  const sel=ws[st.sel];if(sel){g.strokeStyle="#888";g.setLineDash([3,3]);g.beginPath();g.moveTo(X(sel.step),8);g.lineTo(X(sel.step),h-B);g.stroke();g.setLineDash([]);}
}
function drawHeat(){
  const c=$("heat"),w0=st.windows[st.sel];const[g,w,h]=fit(c);g.clearRect(0,0,w,h);
  if(!w0){g.fillStyle="#777";g.fillText("no window yet",10,20);return;}
  const grid=w0.worker_slowdown,pp=grid.length,dp=grid[0].length;
  let vmax=1.5;grid.forEach(r=>r.forEach(v=>{if(v!=null&&v>vmax)vmax=v;}));
  const L=30,T=4,cw=(w-L-4)/dp,ch=(h-T-16)/pp;
  for(let p=0;p<pp;p++)for(let d=0;d<dp;d++){g.fillStyle=color(grid[p][d],vmax);
    g.fillRect(L+d*cw,T+p*ch,Math.max(cw-(cw>4?1:0),0.5),Math.max(ch-(ch>4?1:0),0.5));}
  const named=new Set();(w0.findings||[]).forEach(f=>f.ranks.forEach(r=>named.add(r.dp_rank+"/"+r.stage)));
  g.strokeStyle="#000";g.lineWidth=2;named.forEach(k=>{const[d,p]=k.split("/").map(Number);
    g.strokeRect(L+d*cw+1,T+p*ch+1,Math.max(cw-2,1),Math.max(ch-2,1));});g.lineWidth=1;
  g.fillStyle="#555";g.font="11px sans-serif";const ps=Math.ceil(pp/12),ds=Math.ceil(dp/16);
  for(let p=0;p<pp;p+=ps)g.fillText(p,4,T+p*ch+ch/2+4);
  for(let d=0;d<dp;d+=ds)g.fillText(d,L+d*cw+cw/2-3,h-3);
  c._geo={L,T,cw,ch,pp,dp,grid};
  $("legend").style.background=`linear-gradient(to right,${color(1,vmax)},${color((1+vmax)/2,vmax)},${color(vmax,vmax)})`;
  $("lscale").textContent=`1.00 ... ${vmax.toFixed(2)}   (framed: workers a finding names)`;
  const cells=[];grid.forEach((r,p)=>r.forEach((v,d)=>cells.push([v||0,d,p])));
  cells.sort((a,b)=>b[0]-a[0]);
  $("top").textContent="highest: "+cells.slice(0,5).map(([v,d,p])=>`DP ${d} / stage ${p}: ${v.toFixed(3)}`).join(", ");
}
function renderWindow(){
  const w0=st.windows[st.sel],sl=$("slider");sl.max=Math.max(0,st.windows.length-1);sl.value=Math.max(0,st.sel);
  if(!w0)return;
  $("wlabel").textContent=`window ${st.sel+1}/${st.windows.length}: steps ${w0.steps[0]}-${w0.step}, S ${fmt(w0.slowdown)}`+(st.sel===st.windows.length-1?" (latest, following)":"")+(w0.valid===false?` | ${w0.validity}`:"");
  const fs=w0.findings||[];
  $("findings").innerHTML=fs.length?"<table><tr><th>cause</th><th>ranks (DP/stage)</th><th>steps</th><th>est. cost (job S)</th><th>detector</th></tr>"+
    fs.map(f=>`<tr><td><b>${esc(f.cause)}</b></td><td>${f.ranks.map(r=>`rank ${r.rank} (DP ${r.dp_rank}, stage ${r.stage})`).join("<br>")||"whole job"}${f.n_ranks>f.ranks.length?` ... ${f.n_ranks} in all`:""}</td><td>${f.first_step}-${f.last_step}</td><td>${fmt(f.estimated_slowdown)}</td><td>${esc(f.detector)}</td></tr>`).join("")+"</table>":"none in this window";
  const ot=Object.entries(w0.optype_slowdown||{}).sort((a,b)=>(b[1]||0)-(a[1]||0));
  $("optypes").innerHTML="<table>"+ot.map(([k,v])=>`<tr><td>${esc(k)}</td><td>${fmt(v)}</td></tr>`).join("")+"</table>";
}
function renderHeader(){
  const s=st.summary,w=st.windows[st.windows.length-1];$("run").textContent=s.run||"";
  const state=s.finished?(s.run_ended?"run ended":"monitor stopped"):"live";
  $("status").innerHTML=[`<span>${state}</span>`,`<span>windows: ${st.windows.length}</span>`,
   `<span>last step: ${w?w.step:"-"}</span>`,`<span>S: ${w?fmt(w.slowdown):"-"}${w&&w.valid===false?" (NO VERDICT: not reproduced)":""}</span>`,
   `<span>layout: ${s.layout?`DP ${s.layout[0]} x PP ${s.layout[1]}`:"-"}</span>`,
   `<span>lag: ${w?fmt(w.lag_from_step_end_s??w.lag_s,2)+" s":"-"}</span>`,
   ...(s.nodes&&s.nodes.length?[`<span>nodes: ${s.nodes.length}</span>`]:[]),
   ...(s.nodes||[]).filter(n=>n.lost).map(n=>`<span class="lost">node ${esc(n.hostname||n.node_id.slice(0,12))} LOST (ranks ${n.ranks.join(", ")})</span>`),
   ...(w&&w.note?[`<span class="lost">${esc(w.note)}</span>`]:[])].join("")+
   (st.down?"<span class='muted'>(connection lost: reconnecting)</span>":"");
}
function renderErrors(){$("errors").innerHTML=st.errors.length?st.errors.slice(-20).map(e=>`<div class="err">${e.step!=null?"step "+e.step+": ":""}${esc(e.message)}</div>`).join(""):"none";}
function render(){renderHeader();renderWindow();drawChart();drawHeat();renderErrors();}
async function loadTruth(){
  try{showTruth(await(await fetch("api/truth")).json());}catch(e){$("truthbody").textContent="not available";}
}
function showTruth(t){
    $("truthbody").innerHTML=t.available?(t.faults.length?"<table><tr><th>kind</th><th>targets</th><th>steps</th><th>requested</th></tr>"+t.faults.map(f=>`<tr><td>${esc(f.kind)}</td><td>${(f.targets||[]).map(r=>`DP ${r.dp_rank}, stage ${r.stage}`).join("; ")||"all"}</td><td>${f.first_step}-${f.last_step??"end"}</td><td>${esc(JSON.stringify(f.requested||{}))}</td></tr>`).join("")+"</table>":"a clean run: no fault injected"):esc(t.note||"not available");
}
function summary(s){st.summary=s;later();}
function connect(){
  const after=st.lines.length?st.lines[st.lines.length-1].seq:-1;
  const es=new EventSource("events?after="+after);
  es.addEventListener("open",()=>{st.retry=0;st.down=false;later();});
  es.addEventListener("line",e=>{if(add(JSON.parse(e.data)))later();});
  es.addEventListener("summary",e=>summary(JSON.parse(e.data)));
  // The monitor stopped (the run ended, or it was stopped): nothing more will come.
  es.addEventListener("end",e=>{es.close();st.ended=true;const d=JSON.parse(e.data);summary(d.summary);showTruth(d.truth);});
  // Lost: one note, and a retry of our own, backing off to 30 s (the browser's own
  // retries would log a failed request to the console every 2 s for as long as it is down).
  es.onerror=()=>{es.close();if(st.ended)return;st.down=true;later();
    const wait=Math.min(30000,1000*2**Math.min(st.retry++,5));setTimeout(connect,wait);};
}
$("slider").addEventListener("input",e=>{st.sel=Number(e.target.value);render();});
$("heat").addEventListener("mousemove",e=>{
  const c=$("heat"),G=c._geo,tip=$("tip");if(!G){return;}
  const r=c.getBoundingClientRect(),x=e.clientX-r.left,y=e.clientY-r.top;
  const d=Math.floor((x-G.L)/G.cw),p=Math.floor((y-G.T)/G.ch);
  if(d<0||p<0||d>=G.dp||p>=G.pp){tip.style.display="none";return;}
  tip.style.display="block";tip.style.left=(e.clientX+12)+"px";tip.style.top=(e.clientY+12)+"px";
  tip.textContent=`rank ${p*G.dp+d}: DP ${d}, stage ${p}: ${fmt(G.grid[p][d])}`;});
$("heat").addEventListener("mouseleave",()=>{$("tip").style.display="none";});
window.addEventListener("resize",later);
if(/\/jobs\/[^/]+\/$/.test(location.pathname))$("alljobs").hidden=false;  // one job of several
(async()=>{
  try{const j=await(await fetch("api/windows")).json();j.lines.forEach(add);st.summary=j.summary;}catch(e){}
  render();loadTruth();connect();
})();
</script></body></html>
"""

OVERVIEW = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>stragglerlab monitor: jobs</title>
<link rel="icon" href="data:,">
<style>
body{font:14px system-ui,sans-serif;margin:0;background:#fafafa;color:#222}
header{background:#263238;color:#fff;padding:10px 16px}
header h1{font-size:18px;margin:0 0 4px 0}
main{padding:12px}
table{border-collapse:collapse;width:100%;font-size:13px;background:#fff}
td,th{border-bottom:1px solid #eee;padding:4px 8px;text-align:left;vertical-align:top}
tr.bad td{background:#fff3f0}
.muted{color:#777}
.err{color:#b71c1c}
</style></head>
<body>
<header><h1>stragglerlab monitor: jobs</h1><div id="status">connecting...</div></header>
<main><table><thead><tr><th>job</th><th>S</th><th>findings</th><th>last step</th>
<th>windows</th><th>errors</th><th>layout</th><th>status</th></tr></thead>
<tbody id="jobs"></tbody></table>
<p class="muted">Highest current S first. S is the latest window's job slowdown (1 = no
straggling); a job's row links to its own page. Metrics of every job: <a href="metrics">/metrics</a>
(label <code>job_name</code>).</p></main>
<script>
"use strict";
const $=id=>document.getElementById(id);
const esc=s=>String(s).replace(/[&<>"]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));
const fmt=(x,d=3)=>x==null?"-":Number(x).toFixed(d);
let fails=0;
function finding(f){
  const who=f.ranks.length?f.ranks.map(([d,p])=>`DP ${d}, stage ${p}`).join("; "):"whole job";
  return `${esc(f.cause)}: ${who}${f.estimated_slowdown?` (est. ${fmt(f.estimated_slowdown,2)})`:""}`;
}
function render(j){
  $("jobs").innerHTML=j.jobs.map(r=>`<tr class="${r.findings.length?"bad":""}" data-job="${esc(r.name)}">`+
    `<td><a href="jobs/${encodeURIComponent(r.name)}/">${esc(r.name)}</a><div class="muted">${esc(r.run)}</div></td>`+
    `<td>${fmt(r.slowdown)}${r.valid===false?" (not reproduced)":""}</td>`+
    `<td>${r.findings.length?r.findings.map(finding).join("<br>"):"<span class='muted'>none</span>"}</td>`+
    `<td>${r.last_step??"-"}</td><td>${r.windows_analysed}</td>`+
    `<td class="${r.errors?"err":""}">${r.errors}</td>`+
    `<td>${r.layout?`DP ${r.layout[0]} x PP ${r.layout[1]}`:"-"}</td><td>${esc(r.status)}</td></tr>`).join("");
  $("status").textContent=`${j.jobs.length} job(s), ${j.jobs.filter(r=>r.findings.length).length} with findings`+
    (j.refused?`, ${j.refused} run(s) not watched (--max-jobs)`:"");
}
async function look(){
  try{const r=await fetch("api/jobs");render(await r.json());fails=0;}
  catch(e){fails++;$("status").textContent="monitor not reachable: retrying";}
  setTimeout(look,Math.min(30000,1000*2**Math.min(fails,5)));
}
look();
</script></body></html>
"""
