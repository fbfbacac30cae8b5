// selfcal's offline scene viewer: draws a scene embedded in the page (rigs/scene_html.py) with
// WebGL 1, no library and no network. Drag to turn, shift-drag or right-drag to pan, wheel to zoom.
// The scene: a JSON header (items with offsets into two arrays) and the arrays themselves,
// gzip-compressed uint16 (positions: steps of header.step m from header.origin) and uint32
// (triangle indices), base64 in the page.
(function () {
  "use strict";

  function bytes(base64) {
    const raw = atob(base64), out = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }

  async function gunzip(base64) {
    const stream = new Blob([bytes(base64)]).stream().pipeThrough(new DecompressionStream("gzip"));
    return await new Response(stream).arrayBuffer();
  }

  // Column-major 4x4 matrices, as WebGL takes them.
  function multiply(a, b) {
    const out = new Float32Array(16);
    for (let c = 0; c < 4; c++)
      for (let r = 0; r < 4; r++) {
        let s = 0;
        for (let k = 0; k < 4; k++) s += a[k * 4 + r] * b[c * 4 + k];
        out[c * 4 + r] = s;
      }
    return out;
  }

  function perspective(fovy, aspect, near, far) {
    const f = 1 / Math.tan(fovy / 2), out = new Float32Array(16);
    out[0] = f / aspect; out[5] = f; out[10] = (far + near) / (near - far); out[11] = -1;
    out[14] = 2 * far * near / (near - far);
    return out;
  }

  function lookAt(eye, target, up) {
    const sub = (a, b) => [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
    const cross = (a, b) => [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
    const norm = (a) => { const n = Math.hypot(a[0], a[1], a[2]) || 1; return [a[0] / n, a[1] / n, a[2] / n]; };
    const dot = (a, b) => a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
    const z = norm(sub(eye, target)), x = norm(cross(up, z)), y = cross(z, x);
    return new Float32Array([x[0], y[0], z[0], 0, x[1], y[1], z[1], 0, x[2], y[2], z[2], 0,
                             -dot(x, eye), -dot(y, eye), -dot(z, eye), 1]);
  }

  function smoothNormals(positions, indices) {
    const normals = new Float32Array(positions.length);
    for (let t = 0; t < indices.length; t += 3) {
      const a = indices[t] * 3, b = indices[t + 1] * 3, c = indices[t + 2] * 3;
      const ux = positions[b] - positions[a], uy = positions[b + 1] - positions[a + 1], uz = positions[b + 2] - positions[a + 2];
      const vx = positions[c] - positions[a], vy = positions[c + 1] - positions[a + 1], vz = positions[c + 2] - positions[a + 2];
      const nx = uy * vz - uz * vy, ny = uz * vx - ux * vz, nz = ux * vy - uy * vx;
      for (const i of [a, b, c]) { normals[i] += nx; normals[i + 1] += ny; normals[i + 2] += nz; }
    }
    return normals;
  }

  const VERTEX = `
    attribute vec3 position; attribute vec3 normal;
    uniform mat4 projection_T_world; uniform float pointSize;
    varying vec3 vNormal;
    void main() { vNormal = normal; gl_Position = projection_T_world * vec4(position, 1.0); gl_PointSize = pointSize; }`;
  const FRAGMENT = `
    precision mediump float;
    uniform vec4 colour; uniform float lit; uniform vec3 light;
    varying vec3 vNormal;
    void main() {
      float shade = 1.0;
      if (lit > 0.5) { vec3 n = normalize(vNormal); shade = 0.45 + 0.55 * abs(dot(n, light)); }
      gl_FragColor = vec4(colour.rgb * shade, colour.a);
    }`;

  function compile(gl, kind, source) {
    const shader = gl.createShader(kind);
    gl.shaderSource(shader, source);
    gl.compileShader(shader);
    if (!gl.getShaderParameter(shader, gl.COMPILE_STATUS)) throw new Error(gl.getShaderInfoLog(shader));
    return shader;
  }

  async function show(holder) {
    const canvas = holder.querySelector("canvas");
    const gl = canvas.getContext("webgl", { antialias: true, preserveDrawingBuffer: true });
    if (!gl) { holder.classList.add("no-webgl"); return; }
    holder.classList.add("webgl");
    const header = JSON.parse(holder.querySelector("script.scene-header").textContent);
    const steps = new Uint16Array(await gunzip(holder.querySelector("script.scene-floats").textContent));
    const floats = new Float32Array(steps.length);
    for (let i = 0; i < steps.length; i++) floats[i] = header.origin[i % 3] + header.step * steps[i];
    const ints = new Uint32Array(await gunzip(holder.querySelector("script.scene-ints").textContent));
    gl.getExtension("OES_element_index_uint");
    const program = gl.createProgram();
    gl.attachShader(program, compile(gl, gl.VERTEX_SHADER, VERTEX));
    gl.attachShader(program, compile(gl, gl.FRAGMENT_SHADER, FRAGMENT));
    gl.linkProgram(program);
    gl.useProgram(program);
    const at = { position: gl.getAttribLocation(program, "position"), normal: gl.getAttribLocation(program, "normal") };
    const un = {};
    for (const name of ["projection_T_world", "pointSize", "colour", "lit", "light"]) un[name] = gl.getUniformLocation(program, name);

    const draws = [];
    for (const item of header.items) {
      const positions = floats.subarray(item.v[0], item.v[0] + item.v[1]);
      const position = gl.createBuffer();
      gl.bindBuffer(gl.ARRAY_BUFFER, position);
      gl.bufferData(gl.ARRAY_BUFFER, positions, gl.STATIC_DRAW);
      const draw = { item, position, count: item.v[1] / 3 };
      if (item.type === "mesh") {
        const indices = ints.subarray(item.f[0], item.f[0] + item.f[1]);
        draw.normal = gl.createBuffer();
        gl.bindBuffer(gl.ARRAY_BUFFER, draw.normal);
        gl.bufferData(gl.ARRAY_BUFFER, smoothNormals(positions, indices), gl.STATIC_DRAW);
        draw.index = gl.createBuffer();
        gl.bindBuffer(gl.ELEMENT_ARRAY_BUFFER, draw.index);
        gl.bufferData(gl.ELEMENT_ARRAY_BUFFER, indices, gl.STATIC_DRAW);
        draw.count = item.f[1];
      }
      draws.push(draw);
    }
    // Opaque first, then see-through surfaces without writing depth, so both show.
    draws.sort((a, b) => (a.item.opacity < 1) - (b.item.opacity < 1));

    const lo = header.bounds[0], hi = header.bounds[1];
    const view = { target: [(lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2, (lo[2] + hi[2]) / 2],
                   distance: 1.6 * Math.max(Math.hypot(hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]), 0.2),
                   yaw: -0.9, pitch: 0.45 };

    function render() {
      const width = canvas.clientWidth, height = canvas.clientHeight, ratio = window.devicePixelRatio || 1;
      if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
        canvas.width = Math.round(width * ratio); canvas.height = Math.round(height * ratio);
      }
      gl.viewport(0, 0, canvas.width, canvas.height);
      gl.clearColor(1, 1, 1, 1);
      gl.clear(gl.COLOR_BUFFER_BIT | gl.DEPTH_BUFFER_BIT);
      gl.enable(gl.DEPTH_TEST);
      gl.enable(gl.BLEND);
      gl.blendFunc(gl.SRC_ALPHA, gl.ONE_MINUS_SRC_ALPHA);
      const c = Math.cos(view.pitch);
      const eye = [view.target[0] + view.distance * c * Math.cos(view.yaw), view.target[1] + view.distance * c * Math.sin(view.yaw),
                   view.target[2] + view.distance * Math.sin(view.pitch)];
      const camera = lookAt(eye, view.target, [0, 0, 1]);
      const matrix = multiply(perspective(0.8, canvas.width / canvas.height, view.distance / 200, view.distance * 50), camera);
      gl.uniformMatrix4fv(un.projection_T_world, false, matrix);
      const toEye = [eye[0] - view.target[0], eye[1] - view.target[1], eye[2] - view.target[2]];
      const n = Math.hypot(toEye[0], toEye[1], toEye[2]);
      gl.uniform3f(un.light, toEye[0] / n, toEye[1] / n, toEye[2] / n);
      gl.uniform1f(un.pointSize, Math.max(2, 3 * (window.devicePixelRatio || 1)));
      for (const draw of draws) {
        const item = draw.item;
        gl.uniform4f(un.colour, item.colour[0], item.colour[1], item.colour[2], item.opacity);
        gl.depthMask(item.opacity >= 1);
        gl.bindBuffer(gl.ARRAY_BUFFER, draw.position);
        gl.enableVertexAttribArray(at.position);
        gl.vertexAttribPointer(at.position, 3, gl.FLOAT, false, 0, 0);
        if (item.type === "mesh") {
          gl.uniform1f(un.lit, 1);
          gl.bindBuffer(gl.ARRAY_BUFFER, draw.normal);
          gl.enableVertexAttribArray(at.normal);
          gl.vertexAttribPointer(at.normal, 3, gl.FLOAT, false, 0, 0);
          gl.bindBuffer(gl.ELEMENT_ARRAY_BUFFER, draw.index);
          gl.drawElements(gl.TRIANGLES, draw.count, gl.UNSIGNED_INT, 0);
        } else {
          gl.uniform1f(un.lit, 0);
          gl.disableVertexAttribArray(at.normal);
          gl.vertexAttrib3f(at.normal, 0, 0, 1);
          gl.drawArrays(item.type === "points" ? gl.POINTS : gl.LINES, 0, draw.count);
        }
      }
      gl.depthMask(true);
    }

    let drag = null;
    canvas.addEventListener("contextmenu", (event) => event.preventDefault());
    canvas.addEventListener("mousedown", (event) => { drag = { x: event.clientX, y: event.clientY, pan: event.shiftKey || event.button === 2 }; });
    window.addEventListener("mouseup", () => { drag = null; });
    window.addEventListener("mousemove", (event) => {
      if (!drag) return;
      const dx = event.clientX - drag.x, dy = event.clientY - drag.y;
      drag.x = event.clientX; drag.y = event.clientY;
      if (drag.pan) {
        const step = view.distance / canvas.clientHeight;
        const right = [-Math.sin(view.yaw), Math.cos(view.yaw), 0];
        view.target[0] -= right[0] * dx * step; view.target[1] -= right[1] * dx * step;
        view.target[2] += dy * step;
      } else {
        view.yaw -= dx * 0.01;
        view.pitch = Math.max(-1.5, Math.min(1.5, view.pitch + dy * 0.01));
      }
      render();
    });
    canvas.addEventListener("wheel", (event) => {
      event.preventDefault();
      view.distance *= Math.exp(event.deltaY * 0.001);
      render();
    }, { passive: false });
    window.addEventListener("resize", render);
    render();
    holder.dataset.ready = "1";
  }

  for (const holder of document.querySelectorAll(".selfcal-scene")) {
    show(holder).catch((error) => {
      holder.classList.remove("webgl"); holder.classList.add("no-webgl"); holder.dataset.error = String(error);
    });
  }
})();
