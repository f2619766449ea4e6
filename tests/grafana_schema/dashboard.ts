// A classic (v1, "JSON model") dashboard as Grafana's own schema types it, shared by both schema
// releases the dashboards are checked against: ./schema.ts is a copy of schema-newest.ts or
// schema-oldest.ts. A dashboard is checked by assigning it, as an object literal, to one of the
// two exported types: with excess-property checks a key the schema lacks fails as surely as a
// value of the wrong type. Everything allowed beyond the schema is named below and justified in
// docs/grafana.md, 'Allowances'.
import type {
  bargauge,
  gauge,
  PrometheusQuery,
  raw,
  stat,
  statetimeline,
  table,
  timeseries,
} from './schema';

// The schema's string enums (ThresholdsMode, FieldColorModeId, LegendDisplayMode, ...) accept
// only their own members, never the plain strings JSON holds. Loose<T> replaces each string
// enum by the union of its values (`${E}`) and changes nothing else: a plain `string` stays
// `string`, literal unions stay as they are, and numeric enums already accept their values.
export type Loose<T> = T extends string
  ? `${T}`
  : T extends readonly (infer Item)[]
    ? Loose<Item>[]
    : T extends object
      ? { [K in keyof T]: Loose<T[K]> }
      : T;

// A panel plugin's options and field-config `custom` block: Grafana merges the plugin's
// defaults into whatever a saved panel leaves out, so a top-level option may be absent. What
// is present is checked, down to the required keys of the objects it holds.
type FieldConfigSource<Custom> = Omit<raw.FieldConfigSource, 'defaults'> & {
  defaults: Omit<raw.FieldConfig, 'custom'> & { custom?: Partial<Custom> };
};

type PanelOf<Type extends string, Options, Custom> = Omit<
  raw.Panel,
  'type' | 'options' | 'fieldConfig' | 'targets'
> & {
  type: Type;
  options?: Partial<Options>;
  fieldConfig?: FieldConfigSource<Custom>;
  targets?: PrometheusQuery[];
};

// A panel type with no `custom` field config of its own may only carry an empty one.
type NoCustom = Record<string, never>;

// Only the panel types the bundle uses: another type fails until it is added here.
type Panel =
  | PanelOf<'bargauge', bargauge.Options, NoCustom>
  | PanelOf<'gauge', gauge.Options, NoCustom>
  | PanelOf<'stat', stat.Options, NoCustom>
  | PanelOf<'state-timeline', statetimeline.Options, statetimeline.FieldConfig>
  | PanelOf<'table', table.Options, table.FieldConfig>
  | PanelOf<'timeseries', timeseries.Options, timeseries.FieldConfig>;

type RowPanel = Omit<raw.RowPanel, 'panels'> & { panels: Panel[] };

// Allowance "query variable definition": Grafana stores a query variable's query text at the
// variable level as `definition`, which the v1 VariableModel lacks; query variables only.
type QueryVariable = Omit<raw.VariableModel, 'type'> & { type: 'query'; definition?: string };
type OtherVariable = Omit<raw.VariableModel, 'type'> & {
  type: Exclude<raw.VariableType, 'query'>;
};

type Model = Omit<raw.Dashboard, 'panels' | 'templating'> & {
  panels?: (Panel | RowPanel)[];
  templating?: { list?: (QueryVariable | OtherVariable)[] };
};

// Allowance "import keys": what Grafana's "Export for sharing externally" adds at the top
// level and its importer reads; the grafana-com flavour only.
interface ImportInput {
  name: string;
  label: string;
  description: string;
  type: 'datasource';
  pluginId: string;
  pluginName: string;
}

interface ImportRequirement {
  type: 'grafana' | 'datasource' | 'panel';
  id: string;
  name: string;
  version: string;
}

export type ProvisionedDashboard = Loose<Model>;
export type ImportDashboard = Loose<
  Model & { __inputs: ImportInput[]; __requires: ImportRequirement[] }
>;
