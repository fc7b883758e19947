//! The console's two languages: English and Chinese (the users' own documents are Chinese).
//!
//! A page's language is `?lang=` (then kept in the `lang` cookie), else the cookie, else the
//! first supported language of `Accept-Language`, else English.

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;

/// A supported language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    #[default]
    En,
    Zh,
}

/// Every message: key, English, Chinese.
const MESSAGES: &[(&str, &str, &str)] = &[
    ("nav.skills", "Skills", "技能"),
    ("nav.runs", "Runs", "运行记录"),
    ("nav.engines", "Engines", "引擎"),
    ("nav.sessions", "Agent sessions", "智能体会话"),
    ("nav.api", "API", "API 文档"),
    ("nav.settings", "Settings", "设置"),
    ("nav.menu", "Menu", "菜单"),
    ("nav.skip", "Skip to content", "跳到正文"),
    ("nav.tenants", "Tenants", "租户"),
    ("nav.secrets", "Secrets", "密钥"),
    ("nav.schedules", "Schedules", "定时任务"),
    ("schedules.title", "Schedules", "定时任务"),
    (
        "schedules.hint",
        "Each schedule makes its skill's job at every tick of its cron expression, in its time zone. Make one from a skill's run form (Schedule instead).",
        "每个定时任务在其 cron 表达式的每个时刻（按其时区）创建一次该技能的作业。可在技能的运行表单中（改为定时运行）创建。",
    ),
    ("schedules.skill", "Skill", "技能"),
    ("schedules.cron", "Cron", "Cron 表达式"),
    ("schedules.timezone", "Time zone", "时区"),
    (
        "schedules.overlap",
        "While the previous run runs",
        "上一次运行未结束时",
    ),
    ("schedules.overlap_skip", "skip the tick", "跳过本次"),
    ("schedules.overlap_queue", "queue another run", "照常排队"),
    (
        "schedules.overlap_cancel",
        "cancel the previous run",
        "取消上一次运行",
    ),
    ("schedules.next", "Next ticks", "接下来的时刻"),
    ("schedules.last", "Latest tick", "最近一次"),
    ("schedules.paused", "Paused", "已暂停"),
    ("schedules.open_run", "Open its run", "查看其运行"),
    ("schedules.pause", "Pause", "暂停"),
    ("schedules.resume", "Resume", "恢复"),
    ("schedules.trigger", "Run now", "立即运行"),
    ("schedules.delete", "Delete", "删除"),
    (
        "schedules.confirm_delete",
        "Delete this schedule? The runs it made stay.",
        "删除此定时任务？它已创建的运行会保留。",
    ),
    ("schedules.none", "No schedules yet.", "暂无定时任务。"),
    ("schedules.from_run", "Schedule instead", "改为定时运行"),
    ("schedules.create", "Create the schedule", "创建定时任务"),
    (
        "schedules.no_files",
        "A schedule runs without uploaded files: choose none, or run it once instead.",
        "定时任务不能携带上传文件：请不要选择文件，或改为运行一次。",
    ),
    ("secrets.title", "Secrets", "密钥"),
    (
        "secrets.hint",
        "A skill that asks for a secret (runner.json \"secrets\") gets a placeholder; the egress puts the value in only on HTTPS requests to the secret's hosts, in its header. A value is never shown again.",
        "声明了密钥的技能（runner.json 的 \"secrets\"）只拿到占位符；出口代理仅在发往该密钥主机的 HTTPS 请求中、在其指定的请求头里替换为真实值。值写入后不再显示。",
    ),
    ("secrets.tenant", "Tenant", "租户"),
    ("secrets.name", "Name", "名称"),
    ("secrets.hosts", "Hosts", "主机"),
    ("secrets.header", "Header", "请求头"),
    ("secrets.prefix", "Prefix", "前缀"),
    ("secrets.value", "Value", "值"),
    ("secrets.new_value", "New value", "新值"),
    ("secrets.updated", "Updated", "更新时间"),
    ("secrets.rotate", "Rotate", "轮换"),
    ("secrets.delete", "Delete", "删除"),
    (
        "secrets.confirm_delete",
        "Delete this secret? Runs that hold its placeholder will send it unchanged.",
        "删除此密钥？持有其占位符的运行将原样发送占位符。",
    ),
    ("secrets.new", "New secret", "新建密钥"),
    ("secrets.create", "Create secret", "创建密钥"),
    ("who.tenant", "Tenant", "租户"),
    ("who.logout", "Log out", "退出登录"),
    ("tenants.title", "Tenants", "租户"),
    (
        "tenants.hint",
        "Each tenant sees only its own runs; its keys say what each caller may do. Quotas are set through the API (PATCH /v1/management/tenants/{id}).",
        "每个租户只能看到自己的运行记录；其密钥决定调用者的权限。配额通过 API 设置（PATCH /v1/management/tenants/{id}）。",
    ),
    ("tenants.name", "Name", "名称"),
    ("tenants.id", "Id", "ID"),
    ("tenants.quotas", "Quotas", "配额"),
    ("tenants.new", "New tenant", "新建租户"),
    ("tenants.create", "Create tenant", "创建租户"),
    ("keys.name", "Name", "名称"),
    ("keys.key", "Key", "密钥"),
    ("keys.role", "Role", "角色"),
    ("keys.state", "State", "状态"),
    ("keys.revoked", "revoked", "已吊销"),
    ("keys.used", "last used", "最近使用"),
    ("keys.unused", "never used", "从未使用"),
    ("keys.revoke", "Revoke", "吊销"),
    (
        "keys.confirm_revoke",
        "Revoke this key? Whatever uses it is refused from now on.",
        "确定吊销此密钥？此后使用它的调用都会被拒绝。",
    ),
    ("keys.new", "New key", "新建密钥"),
    ("keys.create", "Create key", "创建密钥"),
    (
        "keys.shown_once",
        "The new key, shown this once: copy it now. Only its hash is kept.",
        "新密钥仅显示这一次，请立即复制。服务只保存其哈希值。",
    ),
    ("keys.copy", "Copy", "复制"),
    (
        "skill.read_only",
        "This key can read runs only: running a skill needs a submit key or wider.",
        "此密钥只能查看运行记录：运行技能需要 submit 或更高权限的密钥。",
    ),
    ("settings.title", "Settings in effect", "当前配置"),
    (
        "settings.hint",
        "What the service was started with: each variable (or its flag, which wins), its value and where that came from. Secrets show only whether they are set. Changes take effect on restart.",
        "服务启动时的配置：每个环境变量（或优先生效的命令行参数）、其值及来源。密钥只显示是否已设置。修改后需重启服务生效。",
    ),
    (
        "settings.given",
        "set by a variable or a flag.",
        "项由环境变量或命令行参数设置。",
    ),
    ("settings.variable", "Variable / flag", "环境变量 / 参数"),
    ("settings.value", "Value", "值"),
    ("settings.source", "From", "来源"),
    ("settings.what", "What it does", "说明"),
    ("settings.flag", "flag", "命令行参数"),
    ("settings.environment", "environment", "环境变量"),
    ("settings.default", "default", "默认值"),
    ("settings.derived", "worked out", "自动推算"),
    ("settings.unset", "not set", "未设置"),
    ("settings.filter", "Find a setting", "查找设置"),
    ("settings.area.service", "Service and storage", "服务与存储"),
    ("settings.area.logs", "Logs and traces", "日志与追踪"),
    ("settings.area.packages", "Skill packages", "技能包"),
    ("settings.area.queue", "Queue and tenants", "队列与租户"),
    ("settings.area.limits", "Run limits", "运行限制"),
    ("settings.area.timers", "Timers and retention", "计时与保留"),
    ("settings.area.invoke", "Invoke host", "调用宿主"),
    ("settings.area.engines", "Engines and agent", "引擎与智能体"),
    (
        "settings.area.access",
        "Access and connections",
        "访问与连接",
    ),
    ("settings.area.sandbox", "Sandbox and network", "沙箱与网络"),
    ("skills.title", "Installed skills", "已安装技能"),
    ("skills.id", "Id", "ID"),
    ("skills.name", "Name", "名称"),
    ("skills.version", "Version", "版本"),
    ("skills.engines", "Engines", "引擎"),
    ("skills.modes", "Execution modes", "执行模式"),
    ("skills.health", "Health", "状态"),
    (
        "skills.none",
        "No skill is installed yet.",
        "尚未安装任何技能。",
    ),
    ("healthy", "healthy", "正常"),
    ("degraded", "degraded", "异常"),
    ("install.title", "Install a skill package", "安装技能包"),
    (
        "install.hint",
        "A zip with one top-level folder named after the skill; a newer version updates it.",
        "一个 zip 包，顶层只有一个以技能 ID 命名的目录；更高版本会更新已有技能。",
    ),
    ("install.submit", "Upload and install", "上传并安装"),
    ("install.working", "Installing…", "正在安装…"),
    ("install.succeeded", "Installed:", "安装成功："),
    ("install.failed", "Install failed:", "安装失败："),
    ("files.title", "Files", "文件"),
    ("files.preview", "Preview", "预览"),
    ("files.source", "Source", "源文件"),
    (
        "files.pick",
        "Pick a file to preview it.",
        "选择一个文件以预览。",
    ),
    (
        "files.binary",
        "Binary file: not previewable.",
        "二进制文件，无法预览。",
    ),
    (
        "files.too_large",
        "Too large to preview (over 256 KiB).",
        "文件过大（超过 256 KiB），无法预览。",
    ),
    ("engines.title", "Engines", "引擎"),
    ("engines.cli", "CLI version", "CLI 版本"),
    ("timeline.title", "Timeline", "时间线"),
    ("timeline.queued", "Queued", "排队"),
    ("timeline.turn", "Turn {n}", "第 {n} 轮"),
    (
        "timeline.repair",
        "Repair round {n} of {of}",
        "修复第 {n} 轮（共 {of} 轮）",
    ),
    ("timeline.waiting", "Waiting for a reply", "等待回复"),
    (
        "timeline.retry",
        "Attempt {n} failed: waiting to try again",
        "第 {n} 次尝试失败：等待重试",
    ),
    ("timeline.answered", "answered", "已回复"),
    ("timeline.auto", "decided automatically", "自动决定"),
    ("timeline.so_far", "so far", "至今"),
    ("engines.target", "Upgrade installs", "升级目标"),
    (
        "engines.differs",
        "(differs from the installed CLI)",
        "（与已安装版本不同）",
    ),
    (
        "engines.no_target",
        "not on npm; set",
        "不在 npm 上；请设置",
    ),
    ("engines.auth", "State", "状态"),
    ("engines.ready", "ready", "就绪"),
    (
        "engines.not_ready",
        "installed, not logged in",
        "已安装，未登录",
    ),
    ("engines.not_installed", "not installed", "未安装"),
    ("engines.install", "Install", "安装"),
    ("engines.sandbox", "Confinement", "隔离"),
    ("engines.network", "network:", "网络:"),
    ("engines.processes", "processes:", "进程:"),
    ("engines.secret", "key:", "密钥:"),
    ("engines.models", "Models", "模型"),
    ("engines.upgrade", "Upgrade", "升级"),
    ("engines.upgrade_all", "Upgrade all engines", "升级全部引擎"),
    (
        "engines.upgrade_hint",
        "Installs each CLI's package into the managed npm prefix, one engine after another.",
        "依次将各引擎 CLI 安装到受管的 npm 前缀中。",
    ),
    ("terminal.title", "Terminal", "终端"),
    ("terminal.open", "Terminal", "终端"),
    ("terminal.stop", "Stop session", "结束会话"),
    (
        "terminal.hint",
        "The engine's own CLI, with HOME at the agent home: log it in here (e.g. /login). One session at a time.",
        "引擎自己的 CLI，HOME 指向 agent home：在此登录（例如 /login）。同一时间只能有一个会话。",
    ),
    ("models.resolved", "Snapshot in use", "当前使用的快照"),
    ("models.notes", "Notes", "备注"),
    ("models.deprecated", "deprecated", "已弃用"),
    ("models.snapshots", "Snapshots", "快照"),
    ("models.file", "File", "文件"),
    ("models.source", "Source", "来源"),
    (
        "models.add",
        "Add a snapshot for CLI version",
        "为 CLI 版本添加快照",
    ),
    (
        "models.add_hint",
        "One model per line: its id, then optionally a comma and its display name. A version that has a snapshot is never overwritten.",
        "每行一个模型：模型 ID，可选逗号加显示名称。已有快照的版本不会被覆盖。",
    ),
    ("models.add_submit", "Add snapshot", "添加快照"),
    ("settings.configuration", "Configuration", "配置"),
    ("logs.title", "Logs", "日志"),
    ("logs.level", "Log level", "日志级别"),
    ("logs.level_now", "In force:", "当前生效："),
    (
        "logs.filter",
        "Or a filter (beats the level)",
        "或过滤规则（优先于级别）",
    ),
    ("logs.set_level", "Set", "设置"),
    ("logs.text", "Text", "文本"),
    ("logs.any", "any", "任意"),
    ("logs.show", "Show", "显示"),
    (
        "logs.shown",
        "The latest {shown} of {total} matching records of this node.",
        "本节点匹配的 {total} 条记录中最新的 {shown} 条。",
    ),
    ("logs.time", "Time", "时间"),
    ("logs.message", "Record", "记录"),
    ("reset.title", "Reset data", "重置数据"),
    (
        "reset.hint",
        "Deletes every run of every tenant with its files, requests and cache entries; skills, engines, logins and settings stay. Refused while a run is active. Type",
        "删除所有租户的全部运行及其文件、请求和缓存；技能、引擎、登录和设置保留。有运行进行中时拒绝。请输入",
    ),
    ("reset.confirmation", "Confirmation", "确认文本"),
    (
        "reset.include_logs",
        "also the kept log records",
        "同时删除保留的日志记录",
    ),
    ("reset.dry_run", "Count only", "仅统计"),
    ("reset.submit", "Reset", "重置"),
    ("reset.would", "Would delete:", "将删除："),
    ("reset.done", "Deleted:", "已删除："),
    (
        "reset.counts",
        "{runs} runs, {requests} requests, {logs} log records.",
        "{runs} 个运行，{requests} 个请求，{logs} 条日志记录。",
    ),
    (
        "signin.browser",
        "Sign in with an OpenAI account",
        "使用 OpenAI 账户登录",
    ),
    ("signin.device", "Use a device code", "使用设备码"),
    (
        "signin.claude",
        "Sign in with a Claude account",
        "使用 Claude 账户登录",
    ),
    (
        "signin.delegate",
        "Let codex log in itself (device code)",
        "让 codex 自行登录（设备码）",
    ),
    ("signin.open", "Open the sign-in page", "打开登录页面"),
    (
        "signin.paste",
        "Then paste the address the browser ended on, or the code the page shows",
        "然后粘贴浏览器最终停留的地址，或页面显示的代码",
    ),
    ("signin.finish", "Finish", "完成"),
    ("signin.enter_code", "Enter the code", "请输入代码"),
    (
        "signin.polling",
        "This page notices the approval by itself.",
        "批准后本页会自动更新。",
    ),
    ("signin.done", "Signed in.", "已登录。"),
    ("engine_login.title", "Login", "登录"),
    (
        "engine_login.hint",
        "How this engine's turns authenticate: an API key, or the login files its CLI leaves on a machine where it was logged in.",
        "本引擎的运行如何认证：API 密钥，或在已登录的机器上由其 CLI 留下的登录文件。",
    ),
    (
        "engine_login.no_cli",
        "its CLI is not installed",
        "其 CLI 未安装",
    ),
    ("engine_login.api_key", "API key", "API 密钥"),
    ("engine_login.present", "present", "已存在"),
    ("engine_login.save_key", "Save key", "保存密钥"),
    ("engine_login.files", "Login files", "登录文件"),
    ("engine_login.import", "Import", "导入"),
    ("engine_login.logout", "Log out", "退出登录"),
    (
        "engine_login.logout_confirm",
        "Remove this engine's key and login files?",
        "移除本引擎的密钥和登录文件？",
    ),
    (
        "engine_login.saved",
        "Logged in; runs queued again: {n}.",
        "已登录；重新排队的运行：{n}。",
    ),
    (
        "engine_login.removed",
        "Logged out; removed: {files}.",
        "已退出；已移除：{files}。",
    ),
    ("mcp.title", "MCP servers", "MCP 服务器"),
    (
        "mcp.hint",
        "The servers the agent CLIs' turns get: every turn of their engines (default), or the turns of skills that require them (declared). Secret values are never shown; one named without a value keeps the stored value.",
        "代理 CLI 的运行可用的服务器：其引擎的每次运行（默认），或声明需要它们的技能的运行（声明）。密钥值从不显示；只写名称不写值则保留已存的值。",
    ),
    ("mcp.add", "Add or replace a server", "添加或替换服务器"),
    ("mcp.id", "Id", "ID"),
    ("mcp.transport", "Transport", "传输方式"),
    ("mcp.activation", "Activation", "启用方式"),
    ("mcp.declared", "declared", "声明"),
    ("mcp.default", "default", "默认"),
    ("mcp.command", "Command", "命令"),
    ("mcp.args", "Arguments (one per line)", "参数（每行一个）"),
    (
        "mcp.env",
        "Secret variables (NAME=value per line)",
        "密钥变量（每行 NAME=value）",
    ),
    (
        "mcp.headers",
        "Secret headers (Name=value per line)",
        "密钥请求头（每行 Name=value）",
    ),
    ("mcp.save", "Save server", "保存服务器"),
    ("mcp.import", "Import JSON", "导入 JSON"),
    (
        "mcp.import_hint",
        "An mcpServers object as the CLIs write it (command, args, env; or url, headers, type), or one server of this API with its id.",
        "CLI 所用的 mcpServers 对象（command、args、env；或 url、headers、type），或本 API 的单个服务器定义（含 id）。",
    ),
    ("mcp.import_submit", "Import", "导入"),
    ("mcp.target", "Command or URL", "命令或 URL"),
    ("mcp.secrets", "Secrets", "密钥"),
    ("mcp.none", "No MCP servers yet.", "暂无 MCP 服务器。"),
    (
        "mcp.delete_confirm",
        "Delete this server? Skills that require it are refused from then on.",
        "删除此服务器？此后需要它的技能将被拒绝。",
    ),
    ("mcp.saved", "Saved: {ids}.", "已保存：{ids}。"),
    ("providers.title", "Providers", "模型提供方"),
    (
        "providers.hint",
        "Endpoints a job reaches with provider_id, beside the engine's own. Models: one per line, with the efforts they take after a colon.",
        "任务可通过 provider_id 使用的其他端点。模型每行一个，冒号后写其支持的推理强度。",
    ),
    ("providers.id", "Provider id", "提供方 ID"),
    ("providers.base_url", "Base URL", "基础 URL"),
    ("providers.api_key", "API key", "API 密钥"),
    (
        "providers.api_key_hint",
        "left empty: keep the stored key",
        "留空则保留已存的密钥",
    ),
    ("providers.key", "Key", "密钥"),
    ("providers.key_set", "stored", "已保存"),
    ("providers.default_model", "Default model", "默认模型"),
    ("providers.actions", "Actions", "操作"),
    ("providers.save", "Save provider", "保存提供方"),
    ("providers.delete", "Delete", "删除"),
    (
        "providers.delete_confirm",
        "Delete this provider? Jobs naming it that have not started will fail.",
        "删除此提供方？尚未开始的相关任务将失败。",
    ),
    ("providers.none", "No providers yet.", "暂无提供方。"),
    ("sessions.title", "Agent sessions", "智能体会话"),
    ("sessions.id", "Session", "会话"),
    ("sessions.first", "First message", "首条消息"),
    ("sessions.provider", "Provider · model", "提供方 · 模型"),
    ("sessions.created", "Created", "创建时间"),
    (
        "sessions.none",
        "No chat yet (POST /v1/agent/chat starts one).",
        "暂无会话（调用 POST /v1/agent/chat 开始对话）。",
    ),
    ("session.title", "Session", "会话"),
    ("session.empty", "No event yet.", "暂无事件。"),
    ("system.init", "session started", "会话开始"),
    ("user.message", "user", "用户"),
    ("assistant.message", "assistant", "助手"),
    ("tool.use", "tool call", "工具调用"),
    ("tool.result", "tool result", "工具结果"),
    (
        "tool.output_compacted",
        "tool output cut (characters)",
        "工具输出已截断（字符）",
    ),
    ("runtime.error", "error", "错误"),
    ("result", "end", "结束"),
    ("user.question", "question", "提问"),
    ("form.how", "Run", "运行方式"),
    ("form.mode", "Execution mode", "执行模式"),
    ("form.model", "Model", "模型"),
    (
        "form.default_model",
        "(the engine's default)",
        "（引擎默认模型）",
    ),
    (
        "form.unready",
        "Not offered until logged in (see Engines):",
        "以下引擎需先登录（见“引擎”页面）：",
    ),
    ("form.inputs", "Inputs and parameters", "输入与参数"),
    ("form.required", "required", "必填"),
    ("form.one_per_line", "One per line.", "每行一项。"),
    (
        "form.task",
        "The task, in your words; the agent gets the skill and decides how to use it.",
        "用你自己的话描述任务；智能体会拿到该技能并自行决定如何使用。",
    ),
    (
        "form.task_files",
        "Files for the task: they land in the run's uploads/ under their own names.",
        "任务所需的文件：以原文件名放入本次运行的 uploads/ 目录。",
    ),
    (
        "form.drop_files",
        "Drop files here, or choose them.",
        "将文件拖放到此处，或点击选择。",
    ),
    ("form.options", "Runtime options", "运行选项"),
    (
        "form.no_cache",
        "always run; never reuse a cached result",
        "总是重新运行，不复用缓存结果",
    ),
    (
        "form.debug",
        "the bundle holds the whole run folder",
        "结果包包含完整运行目录",
    ),
    ("form.submit", "Start the run", "开始运行"),
    ("form.problems", "The form needs changes:", "表单需要修改："),
    (
        "form.files_again",
        "Files are not carried over: choose them again.",
        "文件不会沿用，请重新选择。",
    ),
    ("skill.run", "Run this skill", "运行此技能"),
    ("skill.earlier", "earlier:", "历史版本："),
    (
        "skill.repeating",
        "The form holds the request of run",
        "表单已填入以下运行的请求：",
    ),
    (
        "skill.not_runnable",
        "No engine of this skill is ready to run it. Log in first:",
        "此技能没有可用的引擎。请先登录：",
    ),
    ("skill.latest_runs", "Latest runs", "最近的运行"),
    (
        "skill.all_runs",
        "all runs of this skill →",
        "此技能的全部运行 →",
    ),
    ("skill.schemas", "Schemas", "数据结构"),
    ("skill.format", "Format", "格式"),
    (
        "skill.agent_skill",
        "Agent Skills standard (SKILL.md only)",
        "Agent Skills 标准（仅 SKILL.md）",
    ),
    (
        "skill.runner_json",
        "runner.json package",
        "runner.json 技能包",
    ),
    ("skill.license", "License", "许可证"),
    ("runs.title", "Runs", "运行记录"),
    ("runs.request", "Request", "请求"),
    ("runs.skill", "Skill", "技能"),
    ("runs.engine", "Engine", "引擎"),
    ("runs.status", "Status", "状态"),
    ("runs.pending", "Pending question", "待答问题"),
    ("runs.interactions", "Interactions", "交互次数"),
    ("runs.recovery", "Recovery", "恢复状态"),
    ("runs.updated", "Updated", "更新时间"),
    ("runs.none", "No run yet.", "暂无运行记录。"),
    (
        "runs.none_match",
        "No run matches these filters.",
        "没有符合筛选条件的运行。",
    ),
    ("runs.started", "Started", "开始"),
    ("runs.duration", "Duration", "耗时"),
    ("runs.from", "From", "来源"),
    ("runs.filter", "Filter", "筛选"),
    ("runs.any", "any", "全部"),
    ("runs.within", "Created within", "创建时间范围"),
    ("runs.search", "Search", "搜索"),
    (
        "runs.search_hint",
        "the start or end of a request id, or the start of a skill id",
        "请求 ID 的开头或结尾，或技能 ID 的开头",
    ),
    ("runs.apply", "Apply", "应用"),
    ("runs.clear", "Clear", "清除"),
    ("runs.older", "Older runs →", "更早的运行 →"),
    ("runs.pages", "Pages of runs", "运行记录分页"),
    ("runs.newest", "← Newest runs", "← 最新的运行"),
    ("time.now", "just now", "刚刚"),
    ("queued", "queued", "排队中"),
    ("running", "running", "运行中"),
    ("waiting_user", "waiting for a reply", "等待回复"),
    ("waiting_auth", "waiting for a login", "等待登录"),
    ("succeeded", "succeeded", "成功"),
    ("failed", "failed", "失败"),
    ("canceled", "canceled", "已取消"),
    ("1h", "last hour", "最近 1 小时"),
    ("24h", "last 24 hours", "最近 24 小时"),
    ("7d", "last 7 days", "最近 7 天"),
    ("30d", "last 30 days", "最近 30 天"),
    ("run.title", "Run", "运行"),
    ("run.created", "Created", "创建时间"),
    ("run.error", "Error", "错误"),
    ("run.hint", "What to do", "处理建议"),
    ("error.back", "Back to the console", "返回控制台"),
    (
        "error.no_page",
        "There is no console page at {path}",
        "控制台没有 {path} 这个页面",
    ),
    ("error.400", "Bad Request", "请求有误"),
    ("error.401", "Unauthorized", "未登录"),
    ("error.403", "Forbidden", "无权访问"),
    ("error.404", "Not Found", "未找到"),
    ("error.409", "Conflict", "冲突"),
    ("error.413", "Payload Too Large", "内容过大"),
    ("error.422", "Unprocessable Entity", "无法处理的内容"),
    ("error.429", "Too Many Requests", "请求过多"),
    ("error.500", "Internal Server Error", "服务内部错误"),
    ("error.503", "Service Unavailable", "服务暂不可用"),
    ("login.title", "Log in", "登录"),
    (
        "login.hint",
        "This service asks for an API key (sr_…) or token (SKILL_RUNNER_API_TOKENS). It is kept in a cookie of this browser only.",
        "此服务需要 API 密钥（sr_…）或令牌（SKILL_RUNNER_API_TOKENS）。它仅保存在本浏览器的 Cookie 中。",
    ),
    ("login.token", "API key or token", "API 密钥或令牌"),
    ("login.submit", "Log in", "登录"),
    (
        "login.refused",
        "That key or token is not one of this service's (or it was revoked or has expired).",
        "该密钥或令牌不属于此服务（或已被吊销、已过期）。",
    ),
    ("run.cancel", "Cancel run", "取消运行"),
    ("result.title", "Result", "结果"),
    ("result.warnings", "Validation warnings", "校验警告"),
    ("result.artifacts", "Artifacts", "产物文件"),
    ("result.bundle", "Download the bundle", "下载结果包"),
    (
        "result.debug_bundle",
        "Download the debug bundle (logs and the whole run folder)",
        "下载调试包（日志与完整运行目录）",
    ),
    ("run.rerun", "Re-run", "重新运行"),
    ("run.with_changes", "Run with changes…", "修改后运行…"),
    ("run.stdout", "Raw output (stdout)", "原始输出 (stdout)"),
    ("run.conversation", "Conversation", "对话"),
    ("chat.final", "Final answer", "最终答复"),
    ("chat.question", "Question", "提问"),
    ("chat.reply", "Reply", "回复"),
    ("chat.reasoning", "Reasoning", "推理"),
    ("chat.tool_call", "Tool call", "工具调用"),
    ("chat.tool_result", "Tool result", "工具结果"),
    ("chat.command", "Command", "命令"),
    ("chat.exit_code", "exit code", "退出码"),
    ("chat.succeeded", "The run succeeded.", "运行成功。"),
    ("chat.failed", "The run failed", "运行失败"),
    ("chat.canceled", "The run was canceled.", "运行已取消。"),
    (
        "chat.auto_decided",
        "No reply came in time; the run decides by itself.",
        "未在时限内回复；由运行自行决定。",
    ),
    ("run.stderr", "stderr", "stderr（标准错误输出）"),
    ("run.input", "Input and parameters", "输入与参数"),
    ("run.upload", "Uploaded file", "上传的文件"),
    ("run.parameter", "Parameters", "参数"),
    ("run.stderr_tail", "The end of stderr", "stderr 末尾"),
    ("question.title", "The run asks", "运行中的提问"),
    ("question.yes", "Yes", "是"),
    ("question.no", "No", "否"),
    ("question.send", "Send reply", "提交回复"),
    (
        "question.ack",
        "I understand the risk and want to go on",
        "我了解风险并继续",
    ),
];

/// Every message as `(key, English, Chinese)`: for the checks that a page in one language
/// shows none of the other's.
pub fn catalogue() -> &'static [(&'static str, &'static str, &'static str)] {
    MESSAGES
}

impl Lang {
    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh",
        }
    }

    fn parse(code: &str) -> Option<Self> {
        let primary = code.trim().split(['-', '_']).next()?.to_ascii_lowercase();
        match primary.as_str() {
            "en" => Some(Lang::En),
            "zh" => Some(Lang::Zh),
            _ => None,
        }
    }

    /// The message `key` in this language; an unknown key shows as itself (a test checks that
    /// every key the templates use is known).
    pub fn tr(self, key: &str) -> &str {
        match MESSAGES.iter().find(|(k, ..)| *k == key) {
            Some((_, en, zh)) => match self {
                Lang::En => en,
                Lang::Zh => zh,
            },
            None => key,
        }
    }

    /// The language a query string asks for (`lang=`).
    fn asked(query: Option<&str>) -> Option<Self> {
        form_urlencoded::parse(query?.as_bytes())
            .find(|(key, _)| key == "lang")
            .and_then(|(_, value)| Lang::parse(&value))
    }

    fn from_headers(query: Option<&str>, headers: &HeaderMap) -> Self {
        let asked = Lang::asked(query);
        let cookie = || {
            headers
                .get_all(header::COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(cookie::Cookie::split_parse)
                .flatten()
                .find(|c| c.name() == "lang")
                .and_then(|c| Lang::parse(c.value()))
        };
        // The most preferred language we have, by the header's quality values.
        let accepted = || {
            headers
                .get(header::ACCEPT_LANGUAGE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| {
                    accept_language::parse(v)
                        .iter()
                        .find_map(|tag| Lang::parse(tag))
                })
        };
        asked.or_else(cookie).or_else(accepted).unwrap_or(Lang::En)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Lang {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Lang::from_headers(parts.uri.query(), &parts.headers))
    }
}

/// A middleware that keeps a language asked for with `?lang=` in a cookie.
pub async fn remember(request: Request, next: Next) -> Response {
    let asked = Lang::asked(request.uri().query());
    let mut response = next.run(request).await;
    if let Some(lang) = asked {
        let cookie = cookie::Cookie::build(("lang", lang.code()))
            .path("/")
            .same_site(cookie::SameSite::Lax)
            .max_age(cookie::time::Duration::days(365))
            .build();
        if let Ok(value) = HeaderValue::from_str(&cookie.to_string()) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lang(query: Option<&str>, headers: &[(&str, &str)]) -> Lang {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        Lang::from_headers(query, &map)
    }

    #[test]
    fn query_then_cookie_then_accept_language() {
        assert_eq!(lang(None, &[]), Lang::En);
        assert_eq!(
            lang(None, &[("accept-language", "fr-FR, zh-CN;q=0.8")]),
            Lang::Zh
        );
        // By quality, not by place in the list.
        assert_eq!(
            lang(None, &[("accept-language", "en;q=0.5, zh-CN;q=0.9")]),
            Lang::Zh
        );
        assert_eq!(
            lang(
                None,
                &[("cookie", "a=1; lang=en"), ("accept-language", "zh")]
            ),
            Lang::En
        );
        assert_eq!(
            lang(Some("x=1&lang=zh"), &[("cookie", "lang=en")]),
            Lang::Zh
        );
        assert_eq!(lang(Some("lang=xx"), &[]), Lang::En);
    }

    /// Every `tr("…")` in the templates names a known message, in both languages.
    #[test]
    fn templates_use_known_messages() {
        // The service's templates and the example client's.
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut used = Vec::new();
        let mut stack = vec![
            crates.join("../templates"),
            crates.join("example-client/templates"),
        ];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for piece in text.split("tr(\"").skip(1) {
                    used.push((path.clone(), piece.split('"').next().unwrap().to_owned()));
                }
            }
        }
        assert!(!used.is_empty());
        for (path, key) in used {
            assert!(
                MESSAGES.iter().any(|(k, ..)| *k == key),
                "{}: unknown message '{key}'",
                path.display()
            );
        }
        let mut keys: Vec<_> = MESSAGES.iter().map(|(k, ..)| k).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), MESSAGES.len(), "a key is listed twice");
    }
}
