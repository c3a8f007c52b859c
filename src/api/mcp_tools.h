/* mcp_tools — the tools MCP offers (create_sandbox, list_templates, list_sandboxes, run_code,
 * run_command, read_file, write_file, list_files, pause_sandbox, resume_sandbox, delete_sandbox,
 * snapshot_sandbox, restore_snapshot, fork_sandbox, run_code_in_fork, run), each on cellbox's
 * model: their list for tools/list, and one call of one of them for
 * tools/call. */
#ifndef CELLBOX_API_MCP_TOOLS_H
#define CELLBOX_API_MCP_TOOLS_H

#include <jansson.h>

#include "api/mcp_call.h"

/* tools/list: each tool's name, description and input schema. */
json_t *mcp_tools_list(void);
/* Runs tool `name` with `arguments` for a session whose default sandbox is *default_sandbox
   (an id or ""; a tool may set it). The result goes to mcp_call_finish, now or later. -1 when
   there is no such tool (the call is left to the caller to answer). */
int mcp_tools_call(mcp_call *call, const char *name, json_t *arguments, char default_sandbox[64]);
/* When a session ends: the sandbox it used by default is deleted with it. */
void mcp_tools_session_ended(const char *default_sandbox);

#endif
