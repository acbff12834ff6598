// The API docs of `interlingua serve` (/docs): the service's own /openapi.json, drawn as plain HTML.
// A stand-in for Swagger UI, which would load its scripts from a CDN: nothing here comes from elsewhere.
"use strict";

const $ = (id) => document.getElementById(id);

function el(tag, props = {}, children = []) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of [].concat(children)) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

function refName(ref) {
  return ref.split("/").pop();
}

// A schema's type as a line of text and links: "list of string", "TranslateResponse | null", ...
function typeOf(schema) {
  if (!schema) return ["any"];
  if (schema.$ref) {
    const name = refName(schema.$ref);
    return [el("a", { href: `#schema-${name}`, text: name })];
  }
  const branches = schema.anyOf || schema.oneOf;
  if (branches) {
    return branches.flatMap((branch, i) => (i ? [" | ", ...typeOf(branch)] : typeOf(branch)));
  }
  if (schema.enum) return [schema.enum.map((v) => JSON.stringify(v)).join(" | ")];
  if (schema.const !== undefined) return [JSON.stringify(schema.const)];
  if (schema.type === "array") {
    if (schema.prefixItems) {
      return ["(", ...schema.prefixItems.flatMap((item, i) => (i ? [", ", ...typeOf(item)] : typeOf(item))), ")"];
    }
    return ["list of ", ...typeOf(schema.items)];
  }
  return [schema.type || "object"];
}

function limits(schema) {
  const parts = [];
  for (const [key, word] of [["minimum", ">="], ["exclusiveMinimum", ">"], ["maximum", "<="],
    ["exclusiveMaximum", "<"], ["minLength", "length >="], ["maxLength", "length <="]]) {
    if (schema[key] !== undefined) parts.push(`${word} ${schema[key]}`);
  }
  if (schema.default !== undefined) parts.push(`default ${JSON.stringify(schema.default)}`);
  return parts.join(", ");
}

function fieldsTable(schema, caption) {
  const required = new Set(schema.required || []);
  const rows = Object.entries(schema.properties || {}).map(([name, field]) => el("tr", {}, [
    el("th", { scope: "row" }, [el("code", { text: name })]),
    el("td", {}, typeOf(field)),
    el("td", { text: required.has(name) ? "required" : limits(field) }),
    el("td", { text: field.description || "" }),
  ]));
  if (!rows.length) return el("p", { class: "small", text: "No fields." });
  return el("table", { class: "results" }, [
    el("caption", { text: caption }),
    el("thead", {}, el("tr", {}, ["Field", "Type", "Required / limits", "Meaning"].map(
      (h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, rows),
  ]);
}

function operation(path, method, op) {
  const id = `${method}-${path}`.replace(/[^a-z0-9]+/gi, "-");
  const parts = [
    el("h2", { id }, [el("code", { text: `${method.toUpperCase()} ${path}` })]),
    el("p", { class: "hint", text: op.description || op.summary || "" }),
  ];
  const body = op.requestBody && op.requestBody.content && op.requestBody.content["application/json"];
  if (body) {
    parts.push(el("p", {}, ["Request body (JSON): ", ...typeOf(body.schema)]));
  }
  const answers = Object.entries(op.responses || {}).map(([code, answer]) => {
    const json = answer.content && answer.content["application/json"];
    return el("li", {}, [el("strong", { text: code }), ` ${answer.description || ""}`,
      ...(json && json.schema ? [" (", ...typeOf(json.schema), ")"] : [])]);
  });
  parts.push(el("h3", { text: "Answers" }), el("ul", {}, answers));
  return el("section", { "aria-labelledby": id }, parts);
}

async function start() {
  let spec;
  try {
    const response = await fetch("openapi.json");
    spec = await response.json();
  } catch (err) {
    $("docs-messages").append(el("p", { class: "message error", text: `openapi.json could not be read (${err.message}).` }));
    return;
  }
  $("api-title").textContent = `${spec.info.title} ${spec.info.version} API`;
  $("api-info").textContent = spec.info.description || "";
  const endpoints = $("endpoints");
  for (const [path, methods] of Object.entries(spec.paths || {})) {
    for (const [method, op] of Object.entries(methods)) endpoints.append(operation(path, method, op));
  }
  const schemas = (spec.components && spec.components.schemas) || {};
  for (const [name, schema] of Object.entries(schemas)) {
    $("schema-list").append(el("div", { id: `schema-${name}`, class: "map-block" }, [
      el("h3", { text: name }),
      schema.description ? el("p", { class: "small", text: schema.description }) : null,
      schema.properties ? fieldsTable(schema, `Fields of ${name}`) : el("p", { class: "small" }, typeOf(schema)),
    ]));
  }
}

document.addEventListener("DOMContentLoaded", start);
