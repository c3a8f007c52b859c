/* commands — one function per `cellbox` subcommand. Each takes the words from the command's
 * name on (argv[0] is "create", "exec", ...), answers --help itself, and returns the exit status.
 *
 *   templates.c  templates, template show|delete|import (templates with files of their own)
 *   sandboxes.c  create, ls, info, rm, pause, resume, timeout, restart
 *   network.c    network (show or replace a sandbox's egress lists)
 *   logs.c       logs
 *   execute.c    exec (code in a sandbox's Python kernel), sh (a shell command in a sandbox)
 *   run.c        run (a stateless script in a throwaway sandbox)
 *   files.c      cp (files and directories, both ways)
 *   mcp.c        mcp (the Model Context Protocol on stdio, bridged to the daemon's /mcp)
 *   volumes.c    volume create|ls|rm (named volumes, mounted with create --volume)
 *   template_build.c  template build (a template from a Dockerfile, POST /v1/templates)
 *   snapshots.c  snapshot, snapshots, restore, fork, hibernate, snapshot-rm (live state kept
 *                on the daemon's disk, and the sandboxes made from it)
 */
#ifndef CELLBOX_CLI_COMMANDS_H
#define CELLBOX_CLI_COMMANDS_H

int command_templates(int argc, char **argv);
int command_template(int argc, char **argv);
int command_create(int argc, char **argv);
int command_ls(int argc, char **argv);
int command_info(int argc, char **argv);
int command_network(int argc, char **argv);
int command_rm(int argc, char **argv);
int command_pause(int argc, char **argv);
int command_resume(int argc, char **argv);
int command_timeout(int argc, char **argv);
int command_restart(int argc, char **argv);
int command_logs(int argc, char **argv);
int command_exec(int argc, char **argv);
int command_sh(int argc, char **argv);
int command_run(int argc, char **argv);
int command_cp(int argc, char **argv);
int command_mcp(int argc, char **argv);
int command_volume(int argc, char **argv);
int command_template_build(int argc, char **argv);
int command_snapshot(int argc, char **argv);
int command_snapshots(int argc, char **argv);
int command_restore(int argc, char **argv);
int command_fork(int argc, char **argv);
int command_hibernate(int argc, char **argv);
int command_snapshot_rm(int argc, char **argv);

#endif
