// Prints a rendered container's args, one a line.
//   node print_args.js RENDERED.json COMPONENT CONTAINER
"use strict";
const { Rendered, container } = require("./lib/rendered");

const [renderedPath, component, containerName] = process.argv.slice(2);
const workload = new Rendered(renderedPath).workload(component);
for (const arg of container(workload, containerName).args) console.log(arg);
