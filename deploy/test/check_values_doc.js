// Checks that values.yaml documents every field: each setting (a key with a
// scalar, list or empty-map value) needs a comment right above it or above
// one of its enclosing keys below the top level. Reads the simple block
// style values.yaml uses; list items are data, not fields.
//   node check_values_doc.js values.yaml
"use strict";
const fs = require("fs");

const lines = fs.readFileSync(process.argv[2], "utf8").split("\n");
const keyLine = /^( *)([A-Za-z_][A-Za-z0-9_.-]*):(.*)$/;
const stack = []; // {indent, key, documented}
const undocumented = [];
let commentAbove = false;

for (let i = 0; i < lines.length; i++) {
  const line = lines[i];
  if (/^\s*#/.test(line)) {
    commentAbove = true;
    continue;
  }
  if (line.trim() === "") {
    commentAbove = false;
    continue;
  }
  const m = keyLine.exec(line);
  if (!m) {
    commentAbove = false; // list items and continuation lines
    continue;
  }
  const indent = m[1].length;
  while (stack.length && stack[stack.length - 1].indent >= indent) stack.pop();
  const documented = commentAbove;
  commentAbove = false;
  const value = m[3].replace(/#.*$/, "").trim();
  const next = lines.slice(i + 1).find((l) => l.trim() !== "" && !/^\s*#/.test(l)) || "";
  const nextIndent = next.length - next.trimStart().length;
  const hasChildren = value === "" && nextIndent > indent && !next.trimStart().startsWith("- ");
  const path = [...stack.map((s) => s.key), m[2]].join(".");
  if (!hasChildren) {
    const ancestorDocumented = stack.slice(1).some((s) => s.documented);
    if (!documented && !ancestorDocumented) undocumented.push(`${path} (line ${i + 1})`);
  }
  stack.push({ indent, key: m[2], documented });
}

if (undocumented.length) {
  console.log("values.yaml fields without a comment:\n  " + undocumented.join("\n  "));
  process.exit(1);
}
console.log("values.yaml: every field documented");
