/** The GPU grid: per host, a card per GPU with utilisation and memory bars and its job. */
import { h, meter } from './dom';
import { heldLabel, jobColour, utilisationPercent } from './format';
import { IJob, INode } from './types';

export function renderGpuGrid(nodes: INode[], jobs: IJob[]): HTMLElement {
  const byId = new Map(jobs.map(j => [j.id, j]));
  const root = h('div', { class: 'jp-schedulearn-gpus' });
  if (nodes.every(n => n.gpus.length === 0)) {
    // (the server's log, `schedulearn gpus` and a refused submission say why)
    root.append(
      h('div', { class: 'jp-schedulearn-empty' },
        'No GPUs: the scheduler has none now. On a machine without GPUs, start Jupyter with SCHEDULEARN_VIRTUAL_GPUS=4 to run jobs on 4 virtual ones.')
    );
    return root;
  }
  for (const node of nodes) {
    const busy = node.gpus.filter(g => (g.job_id !== null && g.job_id !== undefined) || g.held_by).length;
    const header = h(
      'div',
      { class: 'jp-schedulearn-node-header' },
      h('span', { class: 'jp-schedulearn-node-name' }, node.name),
      node.virtual ? h('span', { class: 'jp-schedulearn-badge', title: 'declared virtual GPUs (no NVML)' }, 'virtual') : null,
      node.healthy === false ? h('span', { class: 'jp-schedulearn-badge jp-mod-error' }, 'unhealthy') : null,
      h('span', { class: 'jp-schedulearn-node-usage' }, `${busy}/${node.gpus.length} busy`)
    );
    const grid = h('div', { class: 'jp-schedulearn-gpu-grid' });
    for (const gpu of node.gpus) {
      const held = gpu.job_id !== null && gpu.job_id !== undefined;
      const job = held ? byId.get(gpu.job_id as number) : undefined;
      const util = utilisationPercent(gpu.utilization);
      const memPct = gpu.memory_total_mb > 0 ? (100 * gpu.memory_used_mb) / gpu.memory_total_mb : 0;
      const memLabel = `${(gpu.memory_used_mb / 1024).toFixed(1)}/${(gpu.memory_total_mb / 1024).toFixed(0)} GiB`;
      const outside = !held && !!gpu.held_by; // a job the scheduler does not run (Slurm's, another scheduler's)
      const jobLabel = held ? `#${gpu.job_id}${job ? ` ${job.name}` : ''}` : outside ? heldLabel(gpu.held_by as string) : 'idle';
      const virtual = node.virtual || gpu.virtual;
      const card = h(
        'div',
        {
          class: `jp-schedulearn-gpu${held ? ' jp-mod-busy' : ''}${outside ? ' jp-mod-outside' : ''}${virtual ? ' jp-mod-virtual' : ''}`,
          'data-node': node.name,
          'data-index': gpu.index,
          'data-job-id': held ? gpu.job_id ?? undefined : undefined,
          title: `${node.name} GPU ${gpu.index}: ${gpu.name}${gpu.uuid ? ` (${gpu.uuid})` : ''}`
        },
        h(
          'div',
          { class: 'jp-schedulearn-gpu-title' },
          h('span', {}, `GPU ${gpu.index}`),
          h('span', { class: 'jp-schedulearn-gpu-kind' }, virtual ? 'virtual' : shortName(gpu.name))
        ),
        // a virtual GPU, or one whose utilisation is not known here (Slurm): no bar rather than a false 0%
        virtual || gpu.utilization === null ? null : meter('jp-schedulearn-util', util, `${util.toFixed(0)}% util`),
        gpu.memory_total_mb > 0 ? meter('jp-schedulearn-mem', memPct, memLabel) : null,
        h(
          'div',
          {
            class: 'jp-schedulearn-gpu-job',
            style: held ? `border-left-color: ${jobColour(gpu.job_id as number)}` : undefined,
            title: outside ? `held outside the scheduler: ${gpu.held_by}` : undefined
          },
          jobLabel
        )
      );
      grid.append(card);
    }
    root.append(h('div', { class: 'jp-schedulearn-node', 'data-node': node.name }, header, grid));
  }
  return root;
}

/** `NVIDIA A100-SXM4-80GB` → `A100-SXM4-80GB`. */
function shortName(name: string): string {
  return name.replace(/^NVIDIA\s+/i, '').replace(/^GeForce\s+/i, '');
}
