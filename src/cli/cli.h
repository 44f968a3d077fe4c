/* cli.h - the omniserve subcommands; src/main.c dispatches to these.
 * Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the process exit code. Results go to stdout,
 * diagnostics and progress to stderr. */
#ifndef OMNI_CLI_H
#define OMNI_CLI_H

int cli_inspect(int argc, char **argv);  /* src/cli/inspect.c */
int cli_tokenize(int argc, char **argv); /* src/cli/tokenize.c */
int cli_run(int argc, char **argv);      /* src/cli/run.c */
int cli_bench(int argc, char **argv);    /* src/cli/bench.c */
int cli_serve(int argc, char **argv);    /* src/cli/serve.c */
int cli_bench_engine(int argc, char **argv); /* src/cli/bench_engine.c */
int cli_template(int argc, char **argv);  /* src/cli/template.c */
int cli_pull(int argc, char **argv);      /* src/cli/pull.c */
int cli_recommend(int argc, char **argv); /* src/cli/models.c */
int cli_models(int argc, char **argv);    /* src/cli/models.c */
int cli_bench_serve(int argc, char **argv); /* src/cli/bench_serve.c */

int cli_transcribe(int argc, char **argv); /* src/cli/transcribe.c */
int cli_vad(int argc, char **argv);        /* src/cli/vad.c */
int cli_bench_stt(int argc, char **argv);  /* src/cli/bench_stt.c */
int cli_speak(int argc, char **argv);      /* src/cli/speak.c */
int cli_codec_decode(int argc, char **argv); /* src/cli/codec.c */
int cli_bench_tts(int argc, char **argv);    /* src/cli/bench_tts.c */
int cli_voice_clone(int argc, char **argv); /* src/cli/voice_clone.c */

int cli_embed(int argc, char **argv);       /* src/cli/embed.c */
int cli_rerank(int argc, char **argv);      /* src/cli/embed.c */
int cli_bench_embed(int argc, char **argv); /* src/cli/embed.c */

int cli_bench_vision(int argc, char **argv); /* src/cli/bench_vision.c */
int cli_bench_voice(int argc, char **argv);  /* src/cli/bench_voice.c */

#endif
