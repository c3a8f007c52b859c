"""Ready-made bridges between cellbox and agent frameworks, none of which is imported here:

    cellbox.adapters.autogen    CellboxCodeExecutor (AutoGen's code-executor shape, sync) and
                                AsyncCellboxCodeExecutor (autogen-core's async CodeExecutor shape;
                                its own CodeExecutor and Component when autogen_core is installed)
    cellbox.adapters.langchain  ExecuteCodeTool: an `execute_code` tool (name, description, JSON
                                schema, callable); as_langchain_tool() if langchain is installed
    cellbox.adapters.openai     TOOL_SCHEMA and handle_tool_call() for OpenAI function calling

execution_text() turns an Execution into the text a model reads.
"""
from ._text import execution_text

__all__ = ["execution_text"]
