{{/*
Chart name, truncated to 63 characters (the DNS label limit).
*/}}
{{- define "gatebot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified name: the release name, plus the chart name unless the release name
already contains it.
*/}}
{{- define "gatebot.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "gatebot.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "gatebot.labels" -}}
helm.sh/chart: {{ include "gatebot.chart" . }}
{{ include "gatebot.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels.
*/}}
{{- define "gatebot.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gatebot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
ServiceAccount name.
*/}}
{{- define "gatebot.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gatebot.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Container image reference.
*/}}
{{- define "gatebot.image" -}}
{{- $repository := required "image.repository is empty: leave it unset for the published ghcr.io/gatebot/gatebot, or build the image from the repository's Dockerfile, push it, and pass --set image.repository=<registry>/<path>/gatebot (and --set image.tag=<tag>, default the chart's appVersion)" .Values.image.repository }}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
"true" when the store is PostgreSQL.
*/}}
{{- define "gatebot.postgres" -}}
{{- if or .Values.postgres.url .Values.postgres.existingSecret }}true{{ end }}
{{- end }}

{{/*
Name of the Secret the chart creates.
*/}}
{{- define "gatebot.secretName" -}}
{{- include "gatebot.fullname" . }}
{{- end }}

{{/*
Name of the Secret holding the Flagger token the chart generates.
*/}}
{{- define "gatebot.flaggerTokenSecret" -}}
{{- printf "%s-flagger-token" (include "gatebot.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
"true" when the chart must create its own Secret (some inline secret value is set).
*/}}
{{- define "gatebot.createSecret" -}}
{{- $v := .Values }}
{{- if and (not $v.existingSecret) (or $v.adminToken $v.pipelineToken $v.github.webhookSecret $v.github.token $v.github.appPrivateKey $v.slack.signingSecret $v.slack.botToken $v.slack.appToken $v.teams.appPassword $v.teams.workflowUrl $v.evidence.password $v.change.password $v.change.webhookSecret $v.postgres.url) }}true{{ end }}
{{- end }}

{{/*
Secret-backed settings: environment variable → (values key, existingSecretKeys key).
*/}}
{{- define "gatebot.secretEnv" -}}
GATEBOT_ADMIN_TOKEN: [adminToken, adminToken]
GATEBOT_PIPELINE_TOKEN: [pipelineToken, pipelineToken]
GATEBOT_GITHUB_WEBHOOK_SECRET: [github.webhookSecret, githubWebhookSecret]
GATEBOT_GITHUB_TOKEN: [github.token, githubToken]
GATEBOT_GITHUB_APP_PRIVATE_KEY: [github.appPrivateKey, githubAppPrivateKey]
GATEBOT_SLACK_SIGNING_SECRET: [slack.signingSecret, slackSigningSecret]
GATEBOT_SLACK_BOT_TOKEN: [slack.botToken, slackBotToken]
GATEBOT_SLACK_APP_TOKEN: [slack.appToken, slackAppToken]
GATEBOT_TEAMS_APP_PASSWORD: [teams.appPassword, teamsAppPassword]
GATEBOT_TEAMS_WORKFLOW_URL: [teams.workflowUrl, teamsWorkflowUrl]
GATEBOT_PROMETHEUS_PASSWORD: [evidence.password, prometheusPassword]
GATEBOT_CHANGE_PASSWORD: [change.password, changePassword]
GATEBOT_CHANGE_WEBHOOK_SECRET: [change.webhookSecret, changeWebhookSecret]
{{- end }}

{{/*
Refuse combinations that cannot work, with a message that says what to change.
*/}}
{{- define "gatebot.validate" -}}
{{- $v := .Values }}
{{- if and (gt (int $v.replicaCount) 1) (not (include "gatebot.postgres" .)) }}
{{- fail (printf "replicaCount is %d but the store is SQLite, which only one pod may use: set postgres.url or postgres.existingSecret to run several replicas, or set replicaCount to 1" (int $v.replicaCount)) }}
{{- end }}
{{- if and $v.postgres.url $v.postgres.existingSecret }}
{{- fail "set only one of postgres.url and postgres.existingSecret" }}
{{- end }}
{{- if $v.existingSecret }}
{{- if $v.postgres.url }}
{{- fail "postgres.url is a secret and existingSecret is set: put the URL in a Secret and set postgres.existingSecret (it may be the same Secret) instead of postgres.url" }}
{{- end }}
{{- range $name, $keys := include "gatebot.secretEnv" . | fromYaml }}
{{- $path := splitList "." (index $keys 0) }}
{{- $val := $v }}
{{- range $path }}{{ $val = index $val . }}{{ end }}
{{- if $val }}
{{- fail (printf "%s is set inline but existingSecret %q is used: put it in that Secret under key %q and leave %s empty" (index $keys 0) $v.existingSecret (index $v.existingSecretKeys (index $keys 1)) (index $keys 0)) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $v.github.token (or $v.github.appId $v.github.appPrivateKey) }}
{{- fail "set either github.token or a GitHub App (github.appId and github.appPrivateKey), not both" }}
{{- end }}
{{- if and $v.flaggerTokens.remoteClusters $v.flaggerTokens.existingSecret }}
{{- fail "flaggerTokens.remoteClusters is set but flaggerTokens.existingSecret too: the chart generates the other clusters' tokens only beside its own; list every cluster's hash in your Secret and leave remoteClusters empty" }}
{{- end }}
{{- if and $v.flaggerTokens.remoteClusters (not $v.flaggerTokens.enabled) }}
{{- fail "flaggerTokens.remoteClusters is set but flaggerTokens.enabled is false: other clusters are told apart by their tokens" }}
{{- end }}
{{- if has $v.flaggerTokens.cluster $v.flaggerTokens.remoteClusters }}
{{- fail (printf "flaggerTokens.remoteClusters lists %q, which is this cluster (flaggerTokens.cluster)" $v.flaggerTokens.cluster) }}
{{- end }}
{{- if and (not $v.flaggerTokens.enabled) (or $v.gatesIngress.enabled (ne $v.service.type "ClusterIP")) }}
{{- fail "gatesIngress.enabled or a service.type other than ClusterIP exposes the gates beyond the cluster, but flaggerTokens.enabled is false: anyone reaching them could create waits; turn flaggerTokens on" }}
{{- end }}
{{- if and $v.gatesIngress.enabled (not $v.gatesIngress.hosts) }}
{{- fail "gatesIngress.enabled needs gatesIngress.hosts: the host name other clusters' Canaries call" }}
{{- end }}
{{- if and $v.github.appPrivateKey (not $v.github.appId) }}
{{- fail "github.appPrivateKey is set but github.appId is empty" }}
{{- end }}
{{- if and $v.change.webhook (not (or $v.change.webhookSecret $v.existingSecret)) }}
{{- fail (printf "change.webhook is true but no webhook secret is set: set change.webhookSecret, or existingSecret with the secret under key %q (without one gatebot answers 404 on /webhooks/change)" $v.existingSecretKeys.changeWebhookSecret) }}
{{- end }}
{{- end }}

{{/*
ConfigMap key for a template file name: ConfigMap keys may not contain "/".
*/}}
{{- define "gatebot.templateKey" -}}
{{- . | replace "/" "__" }}
{{- end }}

{{/*
Whether gatebot calls the Kubernetes API (kubernetes.lookup or kubernetes.appSecret): then
its ServiceAccount's token is mounted. Empty when it does not.
*/}}
{{- define "gatebot.readsCluster" -}}
{{- if or .Values.kubernetes.lookup.enabled .Values.kubernetes.appSecret.enabled }}true{{ end }}
{{- end }}

{{/*
The Secret /ui/setup/github writes the GitHub App's credentials into.
*/}}
{{- define "gatebot.appSecretName" -}}
{{- .Values.kubernetes.appSecret.name | default (printf "%s-github-app" (include "gatebot.fullname" .)) }}
{{- end }}

{{/*
The token in key `token` of Secret `name`, or a new random one when there is none yet
(`helm template` and the first install): kept across upgrades by `lookup`.
*/}}
{{- define "gatebot.keptToken" -}}
{{- $token := randAlphaNum 40 }}
{{- with lookup "v1" "Secret" .namespace .name }}
{{- with index .data "token" }}
{{- $token = b64dec . }}
{{- end }}
{{- end }}
{{- $token }}
{{- end }}

{{/*
The [limits] table of the policy file, from limits.*, retention.* and evidence.refresh /
evidence.timeout; empty when none is set (gatebot's defaults then hold).
*/}}
{{- define "gatebot.limitsToml" -}}
{{- $lines := list -}}
{{- range $key, $name := dict "headerReadTimeout" "header_read_timeout" "idleTimeout" "idle_timeout" "bodyReadTimeout" "body_read_timeout" "requestTimeout" "request_timeout" -}}
{{- with index $.Values.limits $key -}}
{{- $lines = append $lines (printf "%s = %s" $name (toString . | quote)) -}}
{{- end -}}
{{- end -}}
{{- with .Values.limits.maxConnections -}}
{{- $lines = append $lines (printf "max_connections = %d" (int64 .)) -}}
{{- end -}}
{{- range $key, $value := .Values.retention -}}
{{- if $value -}}
{{- $lines = append $lines (printf "retention_%s = %s" $key (toString $value | quote)) -}}
{{- end -}}
{{- end -}}
{{- with .Values.evidence.refresh -}}
{{- $lines = append $lines (printf "evidence_refresh = %s" (toString . | quote)) -}}
{{- end -}}
{{- with .Values.evidence.timeout -}}
{{- $lines = append $lines (printf "prometheus_timeout = %s" (toString . | quote)) -}}
{{- end -}}
{{- if $lines -}}
[limits]
{{ join "\n" $lines }}
{{- end -}}
{{- end -}}

{{/*
The tables of the policy file that say how gatebot runs here: [templates], [kubernetes] and
[loadtester], from templates.overrides, kubernetes.* and loadtester.openAccess.
*/}}
{{- define "gatebot.settingsToml" -}}
{{- $tables := list -}}
{{- with .Values.github.minPermission -}}
{{- $tables = append $tables (printf "[github]\nmin_permission = %s" (. | quote)) -}}
{{- end -}}
{{- with .Values.slack.approvers -}}
{{- $tables = append $tables (printf "[slack]\napprovers = %s" (toJson .)) -}}
{{- end -}}
{{- with .Values.teams.approvers -}}
{{- $tables = append $tables (printf "[teams]\napprovers = %s" (toJson .)) -}}
{{- end -}}
{{- if .Values.templates.overrides -}}
{{- $tables = append $tables "[templates]\ndir = \"/etc/gatebot/templates\"" -}}
{{- end -}}
{{- $k := list -}}
{{- with .Values.kubernetes.lookup -}}
{{- if .enabled -}}
{{- $k = append $k "lookup = true" -}}
{{- $k = append $k (printf "commit_annotation = %s" (.commitAnnotation | quote)) -}}
{{- $k = append $k (printf "repository_annotation = %s" (.repositoryAnnotation | quote)) -}}
{{- with .container -}}
{{- $k = append $k (printf "container = %s" (. | quote)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if .Values.kubernetes.appSecret.enabled -}}
{{- $k = append $k (printf "app_secret = %s" (include "gatebot.appSecretName" . | quote)) -}}
{{- end -}}
{{- if $k -}}
{{- $tables = append $tables (printf "[kubernetes]\n%s" (join "\n" $k)) -}}
{{- end -}}
{{- if .Values.loadtester.openAccess -}}
{{- $tables = append $tables "[loadtester]\nopen_access = true" -}}
{{- end -}}
{{ join "\n" $tables }}
{{- end -}}

{{/*
metricsServer, with evidence.username as its user part (percent-encoded), as gatebot reads it.
*/}}
{{- define "gatebot.metricsServerUrl" -}}
{{- if .Values.evidence.username -}}
{{- $url := urlParse .Values.metricsServer -}}
{{- $_ := set $url "userinfo" (urlquery .Values.evidence.username | replace "+" "%20") -}}
{{- urlJoin $url -}}
{{- else -}}
{{- .Values.metricsServer -}}
{{- end -}}
{{- end -}}

{{/*
The policy file: `policy`, then the tables the values make ([limits], [templates],
[kubernetes], [loadtester]). Set each in values or in `policy`, not both: TOML refuses a
table written twice.
*/}}
{{- define "gatebot.policyToml" -}}
{{- range $table, $from := dict "limits" "limits.*, retention.* and evidence.refresh/timeout" "templates" "templates.overrides" "kubernetes" "kubernetes.*" "loadtester" "loadtester.openAccess" "github" "github.minPermission" "slack" "slack.approvers" "teams" "teams.approvers" -}}
{{- $made := ternary (include "gatebot.limitsToml" $) (include "gatebot.settingsToml" $) (eq $table "limits") -}}
{{- /* [github.commands.x] may come before the values' [github] and `teams = …` sits in many tables: for the chat tables only a [github] header clashes */ -}}
{{- $clash := printf "(?m)^\\s*(\\[\\s*[\"']?%s[\"']?\\s*[.\\]]|[\"']?%s[\"']?\\s*[.=])" $table $table -}}
{{- if has $table (list "github" "slack" "teams") -}}
{{- $clash = printf "(?m)^\\s*\\[\\s*[\"']?%s[\"']?\\s*\\]" $table -}}
{{- end -}}
{{- if and (regexMatch (printf "(?m)^\\s*\\[%s\\]" $table) $made) (regexMatch $clash ($.Values.policy | default "")) -}}
{{- fail (printf "policy has a [%s] table and %s set it too: write it in one place (TOML refuses a table written twice)" $table $from) -}}
{{- end -}}
{{- end -}}
{{- $parts := list -}}
{{- with .Values.policy -}}
{{- $parts = append $parts (. | trimSuffix "\n") -}}
{{- end -}}
{{- with include "gatebot.limitsToml" . -}}
{{- $parts = append $parts . -}}
{{- end -}}
{{- with include "gatebot.settingsToml" . -}}
{{- $parts = append $parts . -}}
{{- end -}}
{{ join "\n" $parts }}
{{- end -}}
