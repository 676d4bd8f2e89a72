// pgvs3 console: the little the pages need beyond HTML forms. No inline script anywhere (the
// CSP forbids it); names are only ever set with textContent.

const csrf = document.querySelector('meta[name="csrf-token"]')?.content ?? "";

// Buttons that change something irreversible ask first.
for (const button of document.querySelectorAll("button[data-confirm]")) {
  button.addEventListener("click", (event) => {
    if (!window.confirm(button.dataset.confirm)) event.preventDefault();
  });
}

// The policy editor says at once when its text is not JSON (the server checks the rest).
for (const area of document.querySelectorAll('textarea[data-validate="policy"]')) {
  const problems = document.getElementById("policy-problems");
  area.addEventListener("input", () => {
    let problem = "";
    if (area.value.trim() !== "") {
      try {
        const policy = JSON.parse(area.value);
        if (typeof policy !== "object" || policy === null || Array.isArray(policy)) problem = "the policy must be a JSON object";
      } catch (err) {
        problem = "not JSON: " + err.message;
      }
    }
    problems.replaceChildren();
    if (problem) {
      const item = document.createElement("li");
      item.textContent = problem;
      problems.append(item);
    }
    area.setCustomValidity(problem);
  });
}

// Uploads go from this browser to the gateway with presigned URLs; the console only hands
// out the URLs and starts and completes multipart uploads.
const PART_SIZE = 16 * 1024 * 1024;

async function api(step, params) {
  const response = await fetch("/api/upload/" + step, {
    method: "POST",
    headers: { "X-CSRF-Token": csrf },
    body: new URLSearchParams(params),
    credentials: "same-origin",
  });
  const answer = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

function put(url, blob, onProgress) {
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open("PUT", url);
    request.upload.onprogress = (event) => onProgress(event.loaded);
    request.onload = () =>
      request.status >= 200 && request.status < 300 ? resolve() : reject(new Error("the gateway answered " + request.status));
    request.onerror = () => reject(new Error("network error"));
    request.send(blob);
  });
}

// A network error is retried with backoff; the upload goes on where it stopped.
async function retried(attempt) {
  for (let tries = 0; ; tries++) {
    try {
      return await attempt();
    } catch (err) {
      if (tries >= 5) throw err;
      await new Promise((wake) => setTimeout(wake, Math.min(1000 * 2 ** tries, 15000)));
    }
  }
}

async function upload(file, bucket, prefix, show) {
  const key = prefix + file.name;
  if (file.size <= PART_SIZE) {
    const { url } = await api("put", { bucket, key });
    await retried(() => put(url, file, show));
    return;
  }
  // Multipart: the upload id is remembered so a reload resumes with the parts the gateway has
  // (it is no credential: every part still needs a URL signed by this session).
  const memo = ["pgvs3-upload", bucket, key, file.size, file.lastModified].join("\n");
  let uploadId = localStorage.getItem(memo);
  const have = new Map();
  if (uploadId) {
    try {
      for (const part of (await api("parts", { bucket, key, upload_id: uploadId })).parts) have.set(part.part, part.size);
    } catch {
      uploadId = null;
    }
  }
  if (!uploadId) {
    uploadId = (await api("create", { bucket, key, content_type: file.type })).upload_id;
    localStorage.setItem(memo, uploadId);
  }
  let sent = 0;
  for (let part = 1; part * PART_SIZE - PART_SIZE < file.size; part++) {
    const blob = file.slice((part - 1) * PART_SIZE, part * PART_SIZE);
    if (have.get(part) !== blob.size) {
      await retried(async () => {
        const { url } = await api("part", { bucket, key, upload_id: uploadId, part });
        await put(url, blob, (loaded) => show(sent + loaded));
      });
    }
    sent += blob.size;
    show(sent);
  }
  await retried(() => api("complete", { bucket, key, upload_id: uploadId }));
  localStorage.removeItem(memo);
}

const zone = document.getElementById("upload");
if (zone) {
  const list = document.getElementById("uploads");
  const start = async (files) => {
    const work = [...files].map(async (file) => {
      const item = document.createElement("li");
      const label = document.createElement("span");
      label.textContent = file.name;
      const bar = document.createElement("progress");
      bar.max = file.size || 1;
      bar.value = 0;
      const status = document.createElement("span");
      status.className = "status";
      item.append(label, bar, status);
      list.append(item);
      try {
        await upload(file, zone.dataset.bucket, zone.dataset.prefix, (loaded) => (bar.value = loaded));
        bar.value = bar.max;
        status.textContent = "uploaded";
        item.dataset.state = "done";
        return true;
      } catch (err) {
        status.textContent = "failed: " + err.message;
        item.dataset.state = "failed";
        return false;
      }
    });
    const outcomes = await Promise.all(work);
    if (outcomes.every(Boolean)) window.location.reload();
  };
  zone.addEventListener("dragover", (event) => {
    event.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("over");
    start(event.dataTransfer.files);
  });
  document.getElementById("file-input").addEventListener("change", (event) => start(event.target.files));
}
